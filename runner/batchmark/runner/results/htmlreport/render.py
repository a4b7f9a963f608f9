"""A run's results (or several runs side by side) as one self-contained HTML file.

Everything is inline: styles, the charts as SVG, a few lines of script, and the results themselves as
JSON, so the file opens offline, from an e-mail or a CI artifact, years later.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from rich.console import Console
from rich.table import Table
from rich.text import Text

from batchmark.runner import __version__
from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.results.budget import describe_point
from batchmark.runner.results.fingerprint import fingerprint, workload_differences
from batchmark.runner.results.htmlreport.charts import Chart, Rule, Series, bar_chart, colour, format_number, line_chart
from batchmark.runner.results.htmlreport.repeats import repeated_notes, repeated_rows
from batchmark.runner.results.htmlreport.replicas import replica_rows
from batchmark.runner.results.htmlreport.tables import columns, summary_rows, sweep_rows
from batchmark.runner.results.notes import data_note, run_notes
from batchmark.runner.results.presentation import (
    repeat_label,
    run_setting,
    swept_order,
)
from batchmark.runner.results.report import BenchmarkResult, RepeatedBenchmark, RunReport

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("batchmark.runner.results.htmlreport", "templates"),
    autoescape=jinja2.select_autoescape(default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True)
class Metric:
    """One row of the comparison: how to read it from a benchmark, and which direction is better."""

    label: str
    read: Callable[[BenchmarkResult], float | None]
    higher_is_better: bool | None  # None: neither (a setting or a count)


METRICS: tuple[Metric, ...] = (
    Metric("output tokens/s", lambda b: b.throughput.output_tokens_per_second, True),
    Metric("total tokens/s", lambda b: b.throughput.total_tokens_per_second, True),
    Metric("requests/s", lambda b: b.throughput.requests_per_second, True),
    Metric("latency p50, s", lambda b: b.distributions.request_latency.median, False),
    Metric("latency p99, s", lambda b: b.distributions.request_latency.p99, False),
    Metric("queue wait p50, s", lambda b: b.distributions.queue_wait.median, False),
    Metric("TTFT p50, s", lambda b: b.distributions.time_to_first_token.median, False),
    Metric("TPOT p50, s", lambda b: b.distributions.time_per_output_token.median, False),
    Metric("mean batch size", lambda b: b.distributions.batch_size.mean, None),
    Metric("engine utilization", lambda b: b.engine_utilization, True),
    Metric("dispatch overhead mean, s", lambda b: b.distributions.dispatch_overhead.mean, False),
    Metric("dispatch overhead p99, s", lambda b: b.distributions.dispatch_overhead.p99, False),
    Metric("engine steps / 1k requests", lambda b: b.engine_steps_per_1000_requests, False),
    Metric("harness CPU s / request", lambda b: b.harness_cpu_per_request, False),
    Metric("completed", lambda b: float(b.requests.completed), None),
    Metric("errored", lambda b: float(b.requests.errored), False),
    Metric("measured seconds", lambda b: b.measured_duration, None),
)


@dataclass(frozen=True)
class CompareCell:
    value: str
    difference: str  # "" for the baseline or where there is nothing to compare
    verdict: str  # "better", "worse" or "" (CSS class and plain-text marker)


@dataclass(frozen=True)
class CompareRow:
    benchmark: str
    metric: str
    cells: list[CompareCell]


def difference(base: float | None, value: float | None, higher_is_better: bool | None) -> tuple[str, str]:
    """The change from the baseline as a signed percentage, and whether it is better or worse."""
    if base is None or value is None:
        return "", ""
    if base == 0:
        return ("±0%" if value == 0 else "n/a"), ""
    change = value / base - 1
    text = f"{change:+.1%}"
    if higher_is_better is None or abs(change) < 0.005:
        return text, ""
    return text, "better" if (change > 0) == higher_is_better else "worse"


# Shown only where some benchmark of the comparison has them: a budget, a price.
# Only a streamed run (the async backend) reads the interval between tokens.
STREAM_METRICS: tuple[Metric, ...] = (
    Metric("ITL p50, s", lambda b: b.distributions.inter_token_latency.median, False),
    Metric("ITL p99, s", lambda b: b.distributions.inter_token_latency.p99, False),
)
BUDGET_METRICS: tuple[Metric, ...] = (
    Metric("budget met (1 = yes)", lambda b: (1.0 if b.slo.met else 0.0) if b.slo is not None else None, True),
    Metric("goodput output tokens/s", lambda b: b.slo.goodput.output_tokens_per_second if b.slo else None, True),
)
COST_METRICS: tuple[Metric, ...] = (
    Metric("cost per M output tokens", lambda b: b.cost.per_million_output_tokens if b.cost else None, False),
    Metric("cost per M total tokens", lambda b: b.cost.per_million_total_tokens if b.cost else None, False),
)


def compared_metrics(reports: Sequence[tuple[str, RunReport]]) -> tuple[Metric, ...]:
    benchmarks = [b for _, report in reports for b in report.benchmarks]
    metrics = METRICS
    if any(b.distributions.inter_token_latency.count for b in benchmarks):
        metrics += STREAM_METRICS
    if any(b.slo is not None for b in benchmarks):
        metrics += BUDGET_METRICS
    if any(b.cost is not None for b in benchmarks):
        metrics += COST_METRICS
    return metrics


def compare_rows(reports: Sequence[tuple[str, RunReport]]) -> list[CompareRow]:
    """Benchmarks are paired by position (a sweep's n-th benchmark with the other sweep's n-th), named by their
    strategy and swept values."""
    rows: list[CompareRow] = []
    depth = max((len(report.benchmarks) for _, report in reports), default=0)
    metrics = compared_metrics(reports)
    for position in range(depth):
        present = [report.benchmarks[position] if position < len(report.benchmarks) else None for _, report in reports]
        labels = sorted({describe_point(b) for b in present if b is not None})
        name = f"{position + 1}. {' / '.join(labels)}"
        for metric in metrics:
            values = [metric.read(b) if b is not None else None for b in present]
            base = values[0]
            cells = []
            for index, value in enumerate(values):
                text = "-" if value is None else format_number(value)
                change, verdict = ("", "") if index == 0 else difference(base, value, metric.higher_is_better)
                cells.append(CompareCell(text, change, verdict))
            rows.append(CompareRow(name, metric.label, cells))
    return rows


THROUGHPUT_POINTS = 50
BATCHES_PER_POINT = 5  # a bin holding n batches reads within about 1/n of the steady rate


def throughput_points(benchmark: BenchmarkResult) -> list[tuple[float, float]]:
    """Output tokens/s over the benchmark, from its timeline merged into wider bins: tokens arrive a batch at a
    time, so a bin narrower than several batches shows the batching rhythm (spikes and zeros), not the
    throughput. At most THROUGHPUT_POINTS bins; (bin centre in seconds, tokens/s) pairs."""
    timeline = [point for point in benchmark.timeline if point.width > 0]
    if not timeline:
        return []
    width = timeline[0].width
    batch_seconds = benchmark.distributions.batch_duration.median or 0.0
    merge = max(1, math.ceil(len(timeline) / THROUGHPUT_POINTS), math.ceil(BATCHES_PER_POINT * batch_seconds / width))
    points = []
    for first in range(0, len(timeline), merge):
        group = timeline[first : first + merge]
        span = sum(point.width for point in group)
        points.append((group[0].start + span / 2, sum(point.output_tokens for point in group) / span))
    return points


def _series_name(run_label: str, benchmark: BenchmarkResult, report: RunReport, several_runs: bool) -> str:
    """The benchmark's point, and its repeat where the run repeated (three legend entries of one name say
    nothing)."""
    point = " ".join(part for part in (describe_point(benchmark), repeat_label(report, benchmark)) if part)
    if not several_runs:
        return point
    return run_label if len(report.benchmarks) == 1 else f"{run_label}: {point}"


def charts(reports: Sequence[tuple[str, RunReport]]) -> list[Chart]:
    several = len(reports) > 1
    throughput: list[Series] = []
    cdf: list[Series] = []
    histograms: list[tuple[str, dict[int, int]]] = []
    index = 0
    for run_label, report in reports:
        origin = min((b.started_at for b in report.benchmarks), default=0.0)
        run_points: list[tuple[float, float]] = []
        for benchmark in (report.benchmarks[position] for position in swept_order(report)):
            name = _series_name(run_label, benchmark, report, several)
            offset = benchmark.started_at - origin
            points = [(offset + x, y) for x, y in throughput_points(benchmark)]
            if several:
                run_points.extend(points)
            else:
                throughput.append(Series(name, points, colour(len(throughput))))
            curve = benchmark.distributions.request_latency.cdf or []
            cdf.append(Series(name, [(value, level) for level, value in curve], colour(index)))
            histograms.append((name, dict(benchmark.batch_size_histogram)))
            index += 1
        if several:
            # One line per run through time: its benchmarks in the order they ran, not the sweep's.
            throughput.append(Series(run_label, sorted(run_points), colour(len(throughput))))
    sizes = sorted({size for _, counts in histograms for size in counts})
    groups = []
    for group_index, (name, counts) in enumerate(histograms):
        total = sum(counts.values()) or 1
        groups.append((name, colour(group_index), [counts.get(size, 0) / total for size in sizes]))
    result = [
        line_chart(
            "throughput",
            "Output throughput over time",
            "seconds since the run's first benchmark started",
            "output tokens/s",
            throughput,
            x_from_zero=True,
        ),
        line_chart("latency-cdf", "Request latency (CDF)", "request latency, s", "share of requests", cdf),
        bar_chart(
            "batch-size",
            "Effective batch size",
            "requests in the batch",
            "share of batches",
            [str(s) for s in sizes],
            groups,
        ),
    ]
    if any(len(report.benchmarks) > 1 and _varies_rate(report) for _, report in reports):
        result.extend(_rate_charts(reports))
    if len({report.dispatch for _, report in reports}) > 1:
        result.extend(_trade_charts(reports))
    if any(report.sweep is not None for _, report in reports):
        result.extend(sweep_charts(reports))
    return result


def _varies_rate(report: RunReport) -> bool:
    """Whether the run has benchmarks of several strategies (a rate sweep), which the rate charts plot."""
    return len({b.strategy for b in report.benchmarks}) > 1


def sweep_axis(report: RunReport) -> str | None:
    """The swept field the sweep view plots against: batch_size if swept, else the first numeric one."""
    if report.sweep is None or not report.benchmarks:
        return None
    numeric = [
        name
        for name in report.sweep.fields
        if all(
            isinstance(b.swept.get(name), int | float) and not isinstance(b.swept.get(name), bool)
            for b in report.benchmarks
        )
    ]
    if "batch_size" in numeric:
        return "batch_size"
    return numeric[0] if numeric else None


def sweep_charts(reports: Sequence[tuple[str, RunReport]]) -> list[Chart]:
    """Output tokens/s and latency against the swept value (log scale for batch size), one series per value of
    the other swept field and strategy; the budget's targets as lines; the recommended point ringed."""
    throughput: list[Series] = []
    latency: list[Series] = []
    rules: list[Rule] = []
    throughput_marks: list[tuple[float, float, str]] = []
    latency_marks: list[tuple[float, float, str]] = []
    axis_names: set[str] = set()
    for run_label, report in reports:
        found = sweep_axis(report)
        if found is None:
            continue
        axis: str = found
        axis_names.add(axis)
        prefix = f"{run_label}: " if len(reports) > 1 else ""
        if report.repeated:
            marks = _repeated_series(report, axis, prefix, run_label, len(reports) > 1, throughput, latency)
            throughput_marks += marks[0]
            latency_marks += marks[1]
        else:
            groups: dict[str, list[tuple[int, BenchmarkResult]]] = {}
            for index, benchmark in enumerate(report.benchmarks):
                others = ", ".join(f"{k}={v}" for k, v in benchmark.swept.items() if k != axis)
                several_strategies = _varies_rate(report)
                name = " ".join(part for part in (benchmark.strategy if several_strategies else "", others) if part)
                groups.setdefault(name, []).append((index, benchmark))
            chosen = report.recommendation.benchmark if report.recommendation is not None else None
            for name, members in groups.items():
                members.sort(key=lambda pair: float(pair[1].swept[axis]))
                label = f"{prefix}{name}" if name else (run_label if len(reports) > 1 else "output tokens/s")
                throughput.append(
                    Series(
                        label,
                        [(float(b.swept[axis]), b.throughput.output_tokens_per_second) for _, b in members],
                        colour(len(throughput)),
                    )
                )
                if any(b.slo is not None for _, b in members):
                    throughput.append(
                        Series(
                            f"{prefix}{name + ' ' if name else ''}goodput",
                            [
                                (float(b.swept[axis]), b.slo.goodput.output_tokens_per_second)
                                for _, b in members
                                if b.slo is not None
                            ],
                            colour(len(throughput)),
                        )
                    )
                for quantile in ("median", "p99"):
                    points = [
                        (float(b.swept[axis]), value)
                        for _, b in members
                        if (value := getattr(b.distributions.request_latency, quantile)) is not None
                    ]
                    latency.append(
                        Series(f"{prefix}{name + ' ' if name else ''}latency {quantile}", points, colour(len(latency)))
                    )
                for index, benchmark in members:
                    if index == chosen:
                        x = float(benchmark.swept[axis])
                        throughput_marks.append((x, benchmark.throughput.output_tokens_per_second, "recommended"))
                        p99 = benchmark.distributions.request_latency.p99
                        if p99 is not None:
                            latency_marks.append((x, p99, "recommended"))
        by_target: dict[float, list[str]] = {}
        for name, target in report.config.get("slo", {}).items():
            parse_slo_name(name)  # a results file's budget was validated when it ran; this keeps it honest
            by_target.setdefault(float(target), []).append(name)
        for target, names in sorted(by_target.items()):
            rules.append(Rule(target, f"{prefix}budget: {', '.join(names)} ≤ {format_number(target)} s", "#cf222e"))
    if not throughput:
        return []
    axis = " / ".join(sorted(axis_names))
    log = axis_names == {"batch_size"}
    x_label = f"{axis} (log scale)" if log else axis
    return [
        line_chart(
            "sweep-batch-throughput",
            f"Output throughput against {axis}",
            x_label,
            "output tokens/s",
            throughput,
            x_log=log,
            highlights=throughput_marks,
        ),
        line_chart(
            "sweep-batch-latency",
            f"Request latency against {axis}",
            x_label,
            "request latency, s",
            latency,
            x_log=log,
            rules=rules,
            highlights=latency_marks,
        ),
    ]


def _repeated_series(
    report: RunReport,
    axis: str,
    prefix: str,
    run_label: str,
    several_runs: bool,
    throughput: list[Series],
    latency: list[Series],
) -> tuple[list[tuple[float, float, str]], list[tuple[float, float, str]]]:
    """A run with repeats: each point once, at the mean over its repeats, with its 95% interval as an error bar.
    Returns the recommended point's marks (throughput, latency)."""
    groups: dict[str, list[RepeatedBenchmark]] = {}
    for entry in report.repeated or []:
        if axis not in entry.swept:
            continue
        name = ", ".join(f"{k}={v}" for k, v in entry.swept.items() if k != axis)
        groups.setdefault(name, []).append(entry)
    chosen = report.recommendation.repeated if report.recommendation is not None else None
    chosen_entry = report.repeated[chosen] if chosen is not None and report.repeated else None
    throughput_marks: list[tuple[float, float, str]] = []
    latency_marks: list[tuple[float, float, str]] = []
    for name, members in groups.items():
        members.sort(key=lambda entry: float(entry.swept[axis]))
        label = f"{prefix}{name}" if name else (run_label if several_runs else "output tokens/s")
        figures = [(float(entry.swept[axis]), entry.output_tokens_per_second) for entry in members]
        throughput.append(
            Series(
                f"{label} (mean, 95% CI)",
                [(x, figure.mean) for x, figure in figures],
                colour(len(throughput)),
                errors=[
                    (x, figure.low, figure.high)
                    for x, figure in figures
                    if figure.low is not None and figure.high is not None
                ],
            )
        )
        latency_figures = [
            (float(entry.swept[axis]), figure)
            for entry in members
            if (figure := next(iter(entry.latency.values()), None))
        ]
        statistic = next(iter(members[0].latency), "latency")
        latency.append(
            Series(
                f"{prefix}{name + ' ' if name else ''}{statistic} (mean, 95% CI)",
                [(x, figure.mean) for x, figure in latency_figures],
                colour(len(latency)),
                errors=[
                    (x, figure.low, figure.high)
                    for x, figure in latency_figures
                    if figure.low is not None and figure.high is not None
                ],
            )
        )
        if chosen_entry is not None and any(entry is chosen_entry for entry in members):
            x = float(chosen_entry.swept[axis])
            throughput_marks.append((x, chosen_entry.output_tokens_per_second.mean, "recommended"))
            first_latency = next(iter(chosen_entry.latency.values()), None)
            if first_latency is not None:
                latency_marks.append((x, first_latency.mean, "recommended"))
    return throughput_marks, latency_marks


def sweep_notes(reports: Sequence[tuple[str, RunReport]]) -> list[str]:
    """The terminal's lines under the summary (the sweep's time, reloads, the recommendation), for the page."""
    notes: list[str] = []
    for run_label, report in reports:
        if report.sweep is not None:
            prefix = f"{run_label}: " if len(reports) > 1 else ""
            notes.extend(prefix + note for note in run_notes(report)[1:])
    return notes


def _rate_charts(reports: Sequence[tuple[str, RunReport]]) -> list[Chart]:
    """A sweep against its request rate: the achieved rate, so the throughput benchmark has its place too."""
    throughput: list[Series] = []
    latency: list[Series] = []
    for run_label, report in reports:
        ordered = sorted(report.benchmarks, key=lambda b: b.throughput.requests_per_second)
        prefix = f"{run_label} " if len(reports) > 1 else ""
        throughput.append(
            Series(
                run_label if len(reports) > 1 else "output tokens/s",
                [(b.throughput.requests_per_second, b.throughput.output_tokens_per_second) for b in ordered],
                colour(len(throughput)),
            )
        )
        for quantile in ("median", "p99"):
            points = [
                (b.throughput.requests_per_second, value)
                for b in ordered
                if (value := getattr(b.distributions.request_latency, quantile)) is not None
            ]
            latency.append(Series(f"{prefix}latency {quantile}", points, colour(len(latency))))
    return [
        line_chart("sweep-throughput", "Throughput against request rate", "requests/s", "output tokens/s", throughput),
        line_chart("sweep-latency", "Latency against request rate", "requests/s", "request latency, s", latency),
    ]


def _trade_charts(reports: Sequence[tuple[str, RunReport]]) -> list[Chart]:
    """Runs fed differently (the batch backend against the async one): each run's benchmarks as points of
    throughput against latency, the trade GuideLLM's advice is about."""
    charts_: list[Chart] = []
    for key, title, label, read in (
        ("trade-latency", "Throughput against request latency", "request latency p50, s", _latency_p50),
        ("trade-ttft", "Throughput against time to first token", "TTFT p50, s", _ttft_p50),
    ):
        series: list[Series] = []
        for run_label, report in reports:
            points = sorted(
                (x, b.throughput.output_tokens_per_second) for b in report.benchmarks if (x := read(b)) is not None
            )
            series.append(Series(f"{run_label} ({report.dispatch})", points, colour(len(series))))
        if any(s.points for s in series):
            charts_.append(line_chart(key, title, label, "output tokens/s", series, x_from_zero=True))
    return charts_


def _latency_p50(benchmark: BenchmarkResult) -> float | None:
    return benchmark.distributions.request_latency.median


def _ttft_p50(benchmark: BenchmarkResult) -> float | None:
    return benchmark.distributions.time_to_first_token.median


def environment() -> jinja2.Environment:
    """The pages' templates (the report's, the history's), autoescaped."""
    return _ENVIRONMENT


def _inline_json(data: Any) -> str:
    """JSON safe inside a <script> element: with <, > and & as escapes, no text can end the element or start
    a comment-like state in it; JSON.parse reads the escapes back as the characters."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(reports: Sequence[tuple[str, RunReport]]) -> str:
    """One report, or several compared against the first (the baseline)."""
    if not reports:
        raise ValueError("nothing to render: no reports")
    several = len(reports) > 1
    first = reports[0][1]
    title = (
        f"batchmark compare: {' vs '.join(label for label, _ in reports)}"
        if several
        else f"batchmark {first.name}: {first.engine.model} on {first.engine.kind}"
    )
    template = environment().get_template("report.html.j2")
    summary, latency = summary_rows(reports)
    printed = [fingerprint(report) for _, report in reports]
    return template.render(
        title=title,
        several=several,
        runs=[
            {
                "label": label,
                "report": report,
                "setting": run_setting(report),
                "data": data_note(report),
                "fingerprint": printed[index].key,
                "image": printed[index].stack["image"],
                "differences": workload_differences(printed[0], printed[index]),
            }
            for index, (label, report) in enumerate(reports)
        ],
        summary=summary,
        latency=latency,
        columns=columns,
        compare=compare_rows(reports) if several else [],
        metrics_per_benchmark=len(compared_metrics(reports)),
        sweep_rows=sweep_rows(reports),
        sweep_notes=sweep_notes(reports),
        repeated_rows=repeated_rows(reports),
        replica_rows=replica_rows(reports),
        repeated_notes=repeated_notes(reports),
        charts=charts(reports),
        version=__version__,
        data=_inline_json({label: report.model_dump(mode="json") for label, report in reports}),
    )


def render_report(report: RunReport) -> str:
    return render([(report.name, report)])


def comparison_table(reports: Sequence[tuple[str, RunReport]]) -> Table:
    """The comparison for a terminal: the same rows as the HTML, differences marked + (better) or - (worse)."""
    table = Table(title=Text(f"batchmark compare (baseline: {reports[0][0]})"), title_justify="left")
    table.add_column("metric")
    for index, (label, _) in enumerate(reports):
        table.add_column(Text(label), justify="right")
        if index > 0:
            table.add_column("Δ", justify="right")
    styles = {"better": "green", "worse": "red", "": ""}
    benchmark = None
    for row in compare_rows(reports):
        if row.benchmark != benchmark:
            # One heading row per benchmark keeps the table narrow enough for a terminal.
            benchmark = row.benchmark
            table.add_section()
            table.add_row(Text(benchmark, style="bold"), *[""] * (2 * len(reports) - 1))
        cells: list[str | Text] = [row.metric]
        for index, cell in enumerate(row.cells):
            cells.append(cell.value)
            if index > 0:
                style = styles[cell.verdict]
                cells.append(f"[{style}]{cell.difference}[/]" if style and cell.difference else cell.difference)
        table.add_row(*cells)
    return table


def print_comparison(console: Console, reports: Sequence[tuple[str, RunReport]]) -> None:
    for label, report in reports:
        simulated = " (SIMULATED)" if report.engine.simulated else ""
        incomplete = " (INCOMPLETE)" if not report.complete else ""
        console.print(
            f"{label}: {report.name} {report.engine.model} on {report.engine.kind}{simulated}{incomplete}, "
            f"{run_setting(report)}, run {report.run_id}",
            highlight=False,
            markup=False,
        )
    console.print(comparison_table(reports))
