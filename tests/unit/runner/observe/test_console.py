import io
import re

from rich.console import Console

from batchmark.runner.observe.console import ConsoleObserver, print_summary
from batchmark.runner.results.report import DataSummary, RunReport
from batchmark.runner.results.stats import Distribution
from batchmark.runner.run.events import BatchEvent, Progress
from batchmark.runner.run.profiles import Strategy
from tests.unit.observability_data import SWEPT_BATCH_SIZES, batch, benchmark, repeated_sweep_report
from tests.unit.observability_data import report as run_report


def progress(completed: int) -> Progress:
    return Progress(
        elapsed=1.0,
        issued=completed + 4,
        completed=completed,
        errored=0,
        in_flight=4,
        queued=0,
        output_tokens=completed * 10,
        planned_requests=100,
        planned_seconds=None,
    )


def test_progress_bar_on_a_terminal() -> None:
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, width=120)
    observer = ConsoleObserver(console, show_progress=True)
    observer.on_benchmark_start(Strategy("throughput", max_concurrency=8), 0, 1)
    observer.on_progress(progress(50))
    observer.on_benchmark_end(object())
    assert "in flight 4" in output.getvalue()


def test_no_progress_bar_when_not_a_terminal() -> None:
    output = io.StringIO()
    observer = ConsoleObserver(Console(file=output, force_terminal=False), show_progress=True)
    observer.on_benchmark_start(Strategy("throughput", max_concurrency=8), 0, 1)
    observer.on_progress(progress(50))
    assert "in flight" not in output.getvalue()
    assert "benchmark 1: throughputx8" in output.getvalue()


def test_the_summary_shows_steps_overhead_and_harness_cpu() -> None:
    event = batch(0, 0, 4, 0.2)
    report = event.report._replace(engine_seconds=0.4, overhead_seconds=0.00025, steps=8, harness_cpu=0.01)
    result = benchmark([BatchEvent(report, event.enqueued, event.measured)])
    output = io.StringIO()
    print_summary(Console(file=output, width=200), run_report([result]))
    text = output.getvalue()
    assert "steps/1k req" in text
    assert "2,000" in text  # 8 steps for 4 requests
    assert "0.250" in text  # the overhead's mean (and median) per batch, in milliseconds
    assert "harness CPU ms/req" in text


def test_the_summary_says_why_ttft_is_missing_when_vllms_stats_were_off() -> None:
    event = batch(0, 0, 4, 0.2)
    simulated = run_report([benchmark([event])])
    stats_off = simulated.model_copy(
        update={
            "engine": simulated.engine.model_copy(
                update={"kind": "vllm", "simulated": False, "details": {"engine_stats": False}}
            )
        }
    )
    stats_on = stats_off.model_copy(
        update={"engine": stats_off.engine.model_copy(update={"details": {"engine_stats": True}})}
    )
    for report, said in ((stats_off, True), (stats_on, False), (simulated, False)):
        output = io.StringIO()
        print_summary(Console(file=output, width=400), report)
        text = " ".join(output.getvalue().split())
        assert ("TTFT and TPOT not measured" in text) is said
        assert ("backend.vllm_config.disable_log_stats=false" in text) is said


def printed(report: RunReport, width: int = 200) -> str:
    output = io.StringIO()
    print_summary(Console(file=output, width=width), report)
    return output.getvalue()


def test_the_summary_names_the_data_and_what_was_dropped() -> None:
    report = run_report([benchmark([batch(0, 0, 4, 0.2)])])
    data = DataSummary(
        kind="file",
        source="/data/prompts.jsonl",
        content_hash="ab" * 32,
        samples=1,
        records_read=20,
        skipped_too_long=19,
        output_lengths_from="output_tokens",
        forced_output_lengths=True,
        prompt_tokens=Distribution().summary(),
        output_tokens=Distribution().summary(),
    )
    config = {**report.config, "data": {**report.config["data"], "too_long": "skip"}}
    text = " ".join(printed(report.model_copy(update={"data": data, "config": config}), width=400).split())
    assert "data: file /data/prompts.jsonl, 1 sample from 20 records read" in text
    assert "19 dropped as longer than the model's context (too_long=skip)" in text
    assert f"content sha256 {'ab' * 32}" in text
    synthetic = data.model_copy(
        update={
            "kind": "synthetic_text",
            "source": None,
            "content_hash": None,
            "samples": 1000,
            "records_read": None,
            "skipped_too_long": 0,
        }
    )
    assert "data: synthetic_text, 1,000 samples" in printed(report.model_copy(update={"data": synthetic}))


def test_the_summary_prints_numbers_for_people() -> None:
    """Thousands separators, fixed decimals, units in the headers; never scientific notation."""
    event = batch(0, 0, 4, 0.2)
    slow = event.report._replace(engine_seconds=0.4, overhead_seconds=0.0001882, steps=66_560, harness_cpu=0.00004)
    text = printed(run_report([benchmark([BatchEvent(slow, event.enqueued, event.measured)])]))
    assert "16,640" in text  # engine steps per 1,000 requests
    assert "0.188" in text  # the overhead per batch, in milliseconds
    assert not re.search(r"\d[eE][+-]\d", text), text
    for header in ("lat p99, s", "TPOT p50, ms", "overhead p99, ms", "harness CPU ms/req", "util %"):
        assert header in " ".join(text.split()), header


def test_a_repeated_sweep_shows_its_points_in_order_and_its_repeats_in_their_own_tables() -> None:
    text = printed(repeated_sweep_report(), width=250)
    lines = text.splitlines()
    over_repeats = next(index for index, line in enumerate(lines) if "over 3 repeats" in line)
    each_repeat = next(index for index, line in enumerate(lines) if "throughput of each repeat" in line)
    assert over_repeats < each_repeat  # one row per point first, then the repeats
    points = [int(line.split()[1]) for line in lines[over_repeats:each_repeat] if re.match(r"^│ +\d+ │", line)]
    assert points == list(SWEPT_BATCH_SIZES)
    rows = [line.replace("│", " ").split()[:2] for line in lines[each_repeat:] if re.match(r"^│ +\d+ │ +\d/3 │", line)]
    # Every table of the repeats lists them in the sweep's order, each point's repeats together.
    in_order = [[str(size), f"{repeat}/3"] for size in SWEPT_BATCH_SIZES for repeat in (1, 2, 3)]
    assert rows == in_order * 3  # throughput, latency, the harness's cost
