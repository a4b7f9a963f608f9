import io

from rich.console import Console

from batchmark.runner.observe.console import ConsoleObserver, print_summary
from batchmark.runner.run.events import BatchEvent, Progress
from batchmark.runner.run.profiles import Strategy
from tests.unit.observability_data import batch, benchmark
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
    assert "2000" in text  # 8 steps for 4 requests
    assert "0.00025" in text  # the overhead's mean (and median) per batch
    assert "harness CPU s/req" in text


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
