"""The HTML report's pieces: chart geometry, what the page contains, the comparison, old results files."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from batchmark.runner.results.htmlreport.charts import Series, line_chart, nice_ticks
from batchmark.runner.results.htmlreport.render import (
    BATCHES_PER_POINT,
    THROUGHPUT_POINTS,
    compare_rows,
    comparison_table,
    difference,
    render,
    render_report,
    throughput_points,
)
from batchmark.runner.results.outputs import load_report, report_csv, write_report
from batchmark.runner.results.report import DataSummary, RunReport
from batchmark.runner.results.stats import CDF_LEVELS, Distribution
from tests.unit.observability_data import (
    SWEPT_BATCH_SIZES,
    repeated_sweep_report,
    report,
    simple_report,
    sweep_report,
)


@pytest.mark.parametrize(("low", "high"), [(0, 1), (0, 0.0137), (3, 7.2), (0, 152_456.7), (0.001, 0.0011), (5, 5)])
def test_ticks_are_round_and_cover_the_range(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    assert ticks[0] <= low
    assert ticks[-1] >= high
    steps = {round(b - a, 12) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
    mantissa = float(f"{steps.pop():e}".split("e")[0])
    assert mantissa in (1.0, 2.0, 5.0)


def test_points_stay_inside_the_plot() -> None:
    chart = line_chart("k", "t", "x", "y", [Series("s", [(0.0, 0.0), (1.55, 9.7), (0.7, 3.1)], "#000")])
    left, top, width, height = chart.plot
    for x, y, _ in chart.paths[0].markers:
        assert left <= x <= left + width
        assert top <= y <= top + height


def test_the_page_is_self_contained_and_carries_its_data() -> None:
    report = sweep_report()
    page = render_report(report)
    # Nothing to fetch: no src or href attribute, no url(), no import; the one http string is the SVG namespace.
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "url(" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page
    for key in ("throughput", "latency-cdf", "batch-size", "sweep-throughput", "sweep-latency"):
        assert f'data-chart="{key}"' in page
    embedded = re.search(r'<script type="application/json" id="batchmark-results">(.*?)</script>', page, re.S)
    assert embedded is not None
    assert RunReport.model_validate(json.loads(embedded.group(1))["unit"]) == report


def test_a_single_benchmark_has_no_rate_charts() -> None:
    page = render_report(simple_report())
    assert 'data-chart="throughput"' in page
    assert 'data-chart="sweep-throughput"' not in page


def test_text_from_the_results_cannot_break_out_of_the_page() -> None:
    hostile = "</script><script>alert(1)</script><!--"
    page = render_report(simple_report(model=hostile))
    assert "<script>alert(1)" not in page
    assert page.count("</script>") == 2  # the data block and the legend script, nothing injected


def test_differences_and_verdicts() -> None:
    assert difference(100.0, 110.0, True) == ("+10.0%", "better")
    assert difference(100.0, 110.0, False) == ("+10.0%", "worse")
    assert difference(100.0, 100.2, True) == ("+0.2%", "")  # under half a percent: noise, no verdict
    assert difference(0.0, 0.0, True) == ("±0%", "")
    assert difference(None, 1.0, True) == ("", "")


def test_compare_pairs_benchmarks_by_position() -> None:
    single, sweep = simple_report("one"), sweep_report()
    rows = compare_rows([("a", single), ("b", sweep)])
    throughput = [row for row in rows if row.metric == "output tokens/s"]
    assert len(throughput) == len(sweep.benchmarks)
    assert throughput[0].cells[0].value != "-"
    assert throughput[1].cells[0].value == "-"  # the single run has no second benchmark
    assert throughput[1].cells[1].difference == ""
    page = render([("a", single), ("b", sweep)])
    assert 'id="compare"' in page
    assert comparison_table([("a", single), ("b", sweep)]).row_count == len(rows) + len(sweep.benchmarks)


def test_cdf_points_are_bounded_and_monotonic() -> None:
    distribution = Distribution(exact_limit=1000)
    distribution.extend([float(i) for i in range(5000)])  # past the exact limit: from the t-digest
    summary = distribution.summary()
    assert summary.cdf is not None
    assert [level for level, _ in summary.cdf] == list(CDF_LEVELS)
    values = [value for _, value in summary.cdf]
    assert values == sorted(values)
    assert values[0] == 0.0
    assert values[-1] == 4999.0


def test_results_written_before_cdf_and_histogram_still_load_and_render() -> None:
    data = simple_report().model_dump(mode="json")
    for benchmark in data["benchmarks"]:
        del benchmark["batch_size_histogram"]
        for summary in benchmark["distributions"].values():
            del summary["cdf"]
    old = RunReport.model_validate(data)
    assert old.benchmarks[0].batch_size_histogram == []
    assert "No data to draw." in render_report(old)


def test_throughput_bins_keep_every_token_and_span_several_batches() -> None:
    result = sweep_report().benchmarks[0]
    timeline = [point for point in result.timeline if point.width > 0]
    points = throughput_points(result)
    assert 0 < len(points) <= THROUGHPUT_POINTS
    bin_width = (points[1][0] - points[0][0]) if len(points) > 1 else None
    if bin_width is not None:
        assert bin_width >= BATCHES_PER_POINT * (result.distributions.batch_duration.median or 0) - 1e-9
    merge = max(1, round((bin_width or timeline[0].width * len(timeline)) / timeline[0].width))
    tokens = 0.0
    for index, (_, rate) in enumerate(points):
        group = timeline[index * merge : (index + 1) * merge]
        tokens += rate * sum(point.width for point in group)
    assert tokens == pytest.approx(sum(point.output_tokens for point in timeline))


def test_the_page_and_the_comparison_show_overhead_steps_and_harness_cpu() -> None:
    page = render_report(simple_report())
    for column in ("overhead p50, ms", "overhead p99, ms", "steps/1k req", "CPU ms/req"):
        assert f"<th>{column}</th>" in page
    metrics = {row.metric for row in compare_rows([("a", simple_report()), ("b", simple_report("def456"))])}
    assert {
        "dispatch overhead mean, s",
        "dispatch overhead p99, s",
        "engine steps / 1k requests",
        "harness CPU s / request",
    } <= metrics


def test_a_result_without_benchmarks_renders_in_every_format(tmp_path: Path) -> None:
    """A run stopped before its first benchmark (a signal while the engine loads) still writes every output."""
    empty = report([]).model_copy(update={"complete": False, "stop_reason": "interrupted by SIGTERM"})
    html = render_report(empty)
    assert "No benchmark ran" in html
    assert "INCOMPLETE: interrupted by SIGTERM" in html
    assert report_csv(empty).splitlines() == ["name,run_id,engine,model,batch_size"]
    for suffix in (".json", ".yaml"):
        path = tmp_path / f"r{suffix}"
        write_report(empty, path)
        assert load_report(path) == empty


def rows_of(page: str, table: str) -> list[tuple[str, list[str]]]:
    """(the row's class, its cells' texts) of each body row of the table with that id."""
    body = re.search(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body is not None, table
    rows = []
    for attributes, cells in re.findall(r"<tr([^>]*)>(.*?)</tr>", body.group(1), re.S):
        kind = re.search(r'class="([^"]*)"', attributes)
        texts = [
            re.sub(r"<[^>]+>", "", cell).replace("▸", "").strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)
        ]
        rows.append((kind.group(1) if kind else "", texts))
    return rows


def test_a_repeated_sweep_shows_one_row_per_point_in_the_swept_order_with_its_repeats_folded_beneath() -> None:
    page = render_report(repeated_sweep_report())
    for table in ("summary", "latency", "sweep"):
        rows = rows_of(page, table)
        points = [cells for kind, cells in rows if kind.startswith("point")]
        expected = [f"throughputx8 (batch_size={size})" for size in SWEPT_BATCH_SIZES]
        if table == "sweep":  # its first column is the swept value
            expected = [str(size) for size in SWEPT_BATCH_SIZES]
        assert [cells[0] for cells in points] == expected, table
        # Each point: n and its figures as mean [low, high]; its three repeats right beneath it, in order.
        assert all("3" in cells for cells in points)
        kinds = [kind.split()[0] for kind, _ in rows]
        assert kinds == ["point", "repeat", "repeat", "repeat"] * len(SWEPT_BATCH_SIZES), table
        repeats = [cells for kind, cells in rows if kind == "repeat"]
        assert [next(cell for cell in cells if cell.endswith("/3")) for cells in repeats[:3]] == ["1/3", "2/3", "3/3"]
    summary = rows_of(page, "summary")
    assert re.fullmatch(
        r"[\d,]+\.\d \[[\d,]+\.\d, [\d,]+\.\d\]", summary[0][1][summary_columns(page).index("out tok/s")]
    )
    assert page.count('<tr class="repeat" data-group=') == 3 * 15
    assert all(" hidden>" in row for row in re.findall(r'<tr class="repeat"[^>]*>', page))


def summary_columns(page: str) -> list[str]:
    head = re.search(r'<table id="summary">\s*<thead><tr>(.*?)</tr>', page, re.S)
    assert head is not None
    return re.findall(r"<th>(.*?)</th>", head.group(1))


def test_a_repeated_sweeps_legends_name_each_repeat_in_the_swept_order() -> None:
    page = render_report(repeated_sweep_report())
    for chart in ("throughput", "latency-cdf", "batch-size"):
        figure = re.search(rf'<figure class="chart" data-chart="{chart}">(.*?)</figure>', page, re.S)
        assert figure is not None
        legend = re.findall(r'<li data-series="\d+">(?:<span[^>]*></span>)?(.*?)</li>', figure.group(1))
        assert len(legend) == len(set(legend)) == 15, legend
        assert legend[:4] == [
            "throughputx8 (batch_size=8) repeat 1/3",
            "throughputx8 (batch_size=8) repeat 2/3",
            "throughputx8 (batch_size=8) repeat 3/3",
            "throughputx8 (batch_size=16) repeat 1/3",
        ]


def test_the_header_names_the_sweep_and_the_data() -> None:
    page = render_report(repeated_sweep_report())
    meta = re.search(r'<div class="meta run">(.*?)</div>', page, re.S)
    assert meta is not None
    assert "sweep of 5 points over batch_size 8, 16, 32, 64, 128, 3 repeats each" in meta.group(1)
    assert "batch size" not in meta.group(1)
    assert "batch size 4" in render_report(simple_report())
    assert "data: " not in page  # results written before the report said which data ran
    data = DataSummary(
        kind="dataset",
        source="org/prompts",
        content_hash="0f" * 32,
        samples=500,
        records_read=1_200,
        skipped_too_long=700,
        output_lengths_from="output_tokens",
        forced_output_lengths=True,
        prompt_tokens=Distribution().summary(),
        output_tokens=Distribution().summary(),
    )
    described = render_report(simple_report().model_copy(update={"data": data}))
    assert "data: dataset org/prompts, 500 samples from 1,200 records read, 700 dropped as longer than" in described
    assert f"content sha256 {'0f' * 32}" in described


def test_the_page_prints_numbers_for_people() -> None:
    """Thousands separators and fixed decimals, never scientific notation, units in the headers."""
    page = render_report(repeated_sweep_report())
    tables = "".join(re.findall(r"<table.*?</table>", page, re.S))
    assert not re.search(r"\d[eE][+-]?\d", tables)
    assert re.search(r">[\d,]+\.\d \[[\d,]+\.\d, [\d,]+\.\d\]<", tables)  # output tokens/s over repeats: one decimal
    assert {"lat p99, s", "TPOT p50, ms", "overhead p50, ms", "CPU ms/req", "util %"} <= set(
        re.findall(r"<th>(.*?)</th>", tables)
    )
