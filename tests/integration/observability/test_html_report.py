"""The HTML report in a real browser: headless Chromium, network off, every console message watched."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.observability.browser import Chromium, Page, chromium

pytestmark = pytest.mark.integration

BATCHMARK = [sys.executable, "-m", "batchmark.runner.cli"]
BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0"
DATA = "kind=synthetic_text,prompt_tokens=256,output_tokens=128"
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "observability"
SINGLE_CHARTS = ("throughput", "latency-cdf", "batch-size")
SWEEP_CHARTS = (*SINGLE_CHARTS, "sweep-throughput", "sweep-latency")


def batchmark(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*BATCHMARK, *args], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result


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
