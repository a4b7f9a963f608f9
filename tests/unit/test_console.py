import io

from rich.console import Console

from batchmark.runner.console import ConsoleObserver
from batchmark.runner.events import Progress
from batchmark.runner.profiles import Strategy


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
