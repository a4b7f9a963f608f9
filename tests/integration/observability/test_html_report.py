"""The HTML report in a real browser: headless Chromium, network off, every console message watched."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import Finished, run_program
from tests.integration.observability.browser import Chromium, Page, chromium

pytestmark = pytest.mark.integration

BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0"
DATA = "kind=synthetic_text,prompt_tokens=256,output_tokens=128"
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "observability"
SINGLE_CHARTS = ("throughput", "latency-cdf", "batch-size")
SWEEP_CHARTS = (*SINGLE_CHARTS, "sweep-throughput", "sweep-latency")
BATCH_SWEEP_CHARTS = (*SINGLE_CHARTS, "sweep-batch-throughput", "sweep-batch-latency")
BATCH_SIZES = ("4", "8", "16", "32", "64")
REPEATED_BATCH_SIZES = ("8", "16", "32", "64", "128")
WINDOW = 1400  # px: the widest table must fit a window this wide


def batchmark(*args: str) -> Finished:
    """``batchmark ARGS``, which must succeed."""
    finished = run_program(args, timeout=300)
    assert finished.code == 0, finished.stderr
    return finished


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep (with its .html written by the run itself) and a single throughput benchmark."""
    folder = tmp_path_factory.mktemp("results")
    common = ["run", "--quiet", "--backend", BACKEND, "--data", DATA, "--constraint", "kind=max_requests,count=60"]
    batchmark(
        *common,
        "--name",
        "sweep",
        "--profile",
        "kind=sweep,sweep_size=4",
        "--output",
        str(folder / "sweep.json"),
        "--output",
        str(folder / "sweep.html"),
    )
    batchmark(*common, "--profile", "kind=throughput,max_concurrency=16", "--output", str(folder / "single.json"))
    batchmark(
        *common,
        "--name",
        "batch-sweep",
        "--profile",
        "kind=throughput,max_concurrency=64",
        "--sweep",
        f"batch_size={','.join(BATCH_SIZES)}",
        "--slo",
        "request_latency_p99=1000",  # simulated without sleeping: every point meets it
        "--gpu-cost-per-hour",
        "2.5",
        "--output",
        str(folder / "batch-sweep.json"),
        "--output",
        str(folder / "batch-sweep.html"),
    )
    batchmark(
        *common,
        "--name",
        "repeated-sweep",
        "--profile",
        "kind=throughput,max_concurrency=256",
        "--sweep",
        f"batch_size={','.join(REPEATED_BATCH_SIZES)}",
        "--repeats",
        "3",
        "--slo",
        "request_latency_p99=1000",
        "--gpu-cost-per-hour",
        "2.5",
        "--output",
        str(folder / "repeated-sweep.html"),
    )
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with chromium() as instance:
        yield instance


def assert_offline_and_clean(page: Page, url: str) -> None:
    """Nothing but the file itself was requested, and nothing went wrong in the console."""
    assert page.load.problems == [], page.load.problems
    assert [request for request in page.load.requests if request != url] == []


def assert_charts_drawn(page: Page, keys: tuple[str, ...]) -> None:
    drawn = page.evaluate(
        """Array.from(document.querySelectorAll("figure.chart")).map(function (figure) {
             var svg = figure.querySelector("svg");
             var box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
             return {key: figure.dataset.chart, width: box.width, height: box.height,
                     marks: figure.querySelectorAll("svg path.series, svg rect.bar").length,
                     legend: figure.querySelectorAll("ul.legend li").length};
           })"""
    )
    assert [chart["key"] for chart in drawn] == list(keys)
    for chart in drawn:
        assert chart["width"] > 100, chart
        assert chart["height"] > 100, chart
        assert chart["marks"] > 0, chart
        assert chart["legend"] > 0, chart


def test_run_writes_a_report_that_renders_offline(browser: Chromium, results: Path) -> None:
    url = (results / "sweep.html").as_uri()
    with browser.open(url) as page:
        assert_offline_and_clean(page, url)
        assert_charts_drawn(page, SWEEP_CHARTS)
        assert page.evaluate("document.querySelectorAll('#summary tbody tr').length") == 4
        assert page.evaluate("document.documentElement.dataset.runs") == "1"  # the inline script ran
        assert "SIMULATED ENGINE" in page.evaluate("document.body.innerText")
        page.screenshot(ARTIFACTS / "html-report-sweep.png")


def test_report_command_renders_a_saved_result_identically(results: Path, tmp_path: Path) -> None:
    batchmark("report", str(results / "sweep.json"), "-o", str(tmp_path / "again.html"))
    assert (tmp_path / "again.html").read_bytes() == (results / "sweep.html").read_bytes()


def test_compare_prints_and_renders_side_by_side(browser: Chromium, results: Path, tmp_path: Path) -> None:
    output = tmp_path / "compare.html"
    printed = batchmark("compare", str(results / "single.json"), str(results / "sweep.json"), "-o", str(output))
    assert "baseline: single" in printed.stdout
    assert "output tokens/s" in printed.stdout
    assert "%" in printed.stdout  # the differences
    url = output.as_uri()
    with browser.open(url) as page:
        assert_offline_and_clean(page, url)
        assert_charts_drawn(page, SWEEP_CHARTS)
        assert page.evaluate("document.documentElement.dataset.runs") == "2"
        headers = page.evaluate("Array.from(document.querySelectorAll('#compare th')).map(th => th.textContent)")
        assert headers == ["benchmark", "metric", "single", "sweep", "Δ"]
        differences = page.evaluate(
            "Array.from(document.querySelectorAll('#compare tbody tr')).map(tr => tr.lastElementChild.textContent)"
        )
        assert any(text.endswith("%") for text in differences)
        page.screenshot(ARTIFACTS / "html-report-compare.png")


def test_the_browser_checks_catch_errors_and_fetches(browser: Chromium, tmp_path: Path) -> None:
    """A control: a page that fetches from the network and logs errors must fail the checks above."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><img src='https://example.com/chart.png'>"
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    with browser.open(bad.as_uri()) as page:
        assert any("boom" in message for message in page.load.console_errors)
        assert any("undefinedFunction" in message for message in page.load.exceptions)
        assert "https://example.com/chart.png" in page.load.requests
        assert page.load.failed_requests  # offline: the fetch failed


def test_a_batch_size_sweep_has_its_view_budget_line_recommended_point_and_cost(
    browser: Chromium, results: Path
) -> None:
    url = (results / "batch-sweep.html").as_uri()
    with browser.open(url) as page:
        assert_offline_and_clean(page, url)
        assert_charts_drawn(page, BATCH_SWEEP_CHARTS)
        view = page.evaluate(
            """(function () {
                 function all(root, selector) { return Array.from(root.querySelectorAll(selector)); }
                 function text(element) { return element.textContent; }
                 function texts(root, selector) { return all(root, selector).map(text); }
                 function chart(key) { return document.querySelector('figure[data-chart="' + key + '"] svg'); }
                 var latency = chart("sweep-batch-latency"), throughput = chart("sweep-batch-throughput");
                 var ticks = all(throughput, "text")
                   .filter(function (t) { return t.getAttribute("text-anchor") === "middle"; })
                   .map(function (t) { return [t.textContent, parseFloat(t.getAttribute("x"))]; });
                 return {
                   ticks: ticks,
                   xLabel: texts(throughput, "text"),
                   budget: texts(latency, "line.budget"),
                   recommended: all(document, "circle.recommended").length,
                   rows: all(document, "#sweep tbody tr").length,
                   recommendedRows: texts(document, "#sweep tbody tr.recommended td:first-child"),
                   headers: texts(document, "#sweep th"),
                   notes: texts(document, "p.sweep-note")
                 };
               })()"""
        )
        page.screenshot(ARTIFACTS / "html-report-batch-sweep.png")
    # A log scale: the doublings of the batch size sit at equal distances.
    ticks = [(label, x) for label, x in view["ticks"] if label in BATCH_SIZES]
    assert [label for label, _ in ticks] == list(BATCH_SIZES)
    gaps = [right - left for (_, left), (_, right) in itertools.pairwise(ticks)]
    assert max(gaps) - min(gaps) < 1.0, gaps
    assert "batch_size (log scale)" in view["xLabel"]
    assert view["budget"] == ["budget: request_latency_p99 ≤ 1000 s"]
    assert view["recommended"] == 2  # on the throughput and the latency chart
    assert view["rows"] == len(BATCH_SIZES)
    report = json.loads((results / "batch-sweep.json").read_text())
    best = report["recommendation"]["benchmark"]
    assert view["recommendedRows"] == [BATCH_SIZES[best]]
    assert {"batch_size", "budget", "goodput out tok/s", "cost / M out tok", "cost / M total tok"} <= set(
        view["headers"]
    )
    assert any("one engine load for every point" in note for note in view["notes"])
    assert any(note.startswith("Recommended: ") for note in view["notes"])


def png_width(path: Path) -> int:
    """The image's width, from its IHDR chunk."""
    return int.from_bytes(path.read_bytes()[16:20], "big")


def test_a_repeated_sweep_reads_well_in_a_1400_px_window(browser: Chromium, results: Path) -> None:
    """5 batch sizes x 3 repeats: one row per point in the swept order, its repeats folded beneath it; legends
    that name each repeat; a header naming the sweep; no table wider than the window."""
    url = (results / "repeated-sweep.html").as_uri()
    with browser.open(url, width=WINDOW) as page:
        assert_offline_and_clean(page, url)
        assert_charts_drawn(page, BATCH_SWEEP_CHARTS)
        view = page.evaluate(
            """(function () {
                 function all(selector) { return Array.from(document.querySelectorAll(selector)); }
                 function visible(row) { return row.getClientRects().length > 0; }
                 var before = all("#summary tbody tr.repeat").filter(visible).length;
                 var fold = document.querySelector("#summary tr.point button.fold");
                 if (fold) { fold.click(); }
                 var opened = all("#summary tbody tr.repeat").filter(visible).map(function (row) {
                   return row.cells[0].textContent.trim() + " " + row.cells[1].textContent.trim();
                 });
                 return {
                   window: window.innerWidth,
                   page: document.documentElement.scrollWidth,
                   tables: all("table").map(function (table) {
                     return [table.id, Math.ceil(table.getBoundingClientRect().right)];
                   }),
                   points: all("#summary tbody tr.point td:first-child").map(function (td) {
                     return td.textContent.replace("▸", "").trim();
                   }),
                   sweepPoints: all("#sweep tbody tr.point td:first-child").map(function (td) {
                     return td.textContent;
                   }),
                   hiddenBefore: all("#summary tbody tr.repeat").length - before,
                   opened: opened,
                   legend: all('figure[data-chart="throughput"] ul.legend li').map(function (li) {
                     return li.textContent;
                   }),
                   header: document.querySelector("div.meta.run").textContent
                 };
               })()"""
        )
        page.screenshot(ARTIFACTS / "html-report-repeated-sweep.png")
    assert view["window"] == WINDOW
    assert view["page"] <= WINDOW, view["tables"]
    assert all(right <= WINDOW for _, right in view["tables"]), view["tables"]
    assert png_width(ARTIFACTS / "html-report-repeated-sweep.png") <= WINDOW
    assert view["points"] == [f"throughputx256 (batch_size={size})" for size in REPEATED_BATCH_SIZES]
    assert view["sweepPoints"] == list(REPEATED_BATCH_SIZES)
    assert view["hiddenBefore"] == 15  # every repeat folded until its point is opened
    assert view["opened"] == [f"throughputx256 (batch_size=8) {repeat}/3" for repeat in (1, 2, 3)]
    assert len(view["legend"]) == len(set(view["legend"])) == 15
    assert view["legend"][0] == "throughputx256 (batch_size=8) repeat 1/3"
    assert "sweep of 5 points over batch_size 8, 16, 32, 64, 128, 3 repeats each" in view["header"]
    assert "batch size 8" not in view["header"]


def test_compare_names_each_point_by_its_swept_values(results: Path) -> None:
    printed = batchmark("compare", str(results / "batch-sweep.json"), str(results / "batch-sweep.json"))
    for size in BATCH_SIZES:
        assert f"(batch_size={size})" in printed.stdout
    assert "cost per M output tokens" in printed.stdout
    assert "goodput output tokens/s" in printed.stdout
