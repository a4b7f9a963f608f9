"""What a run tells the outside world as it goes: the console, Prometheus and the CR's status listen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.results.report import BenchmarkResult, RunReport
from batchmark.runner.run.profiles import Strategy

Phase = Literal["loading", "warmup", "measuring", "cooldown", "done"]


@dataclass(frozen=True)
class Progress:
    """A snapshot of the benchmark in progress."""

    elapsed: float
    issued: int
    completed: int
    errored: int
    in_flight: int
    queued: int
    output_tokens: int
    planned_requests: int | None
    planned_seconds: float | None


@dataclass(frozen=True)
class BatchEvent:
    """A finished batch with each request's enqueue time (None: left over from an earlier benchmark)."""

    report: BatchReport
    enqueued: list[float | None]
    measured: list[bool]


class RunObserver:
    """Listens to a run; every method is optional. Called from the run's own thread."""

    def on_phase(self, phase: Phase) -> None:
        return None

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        return None

    def on_sweep_point(self, values: dict[str, Any], position: int, total: int) -> None:
        """A sweep's point begins: the backend fields it sets, its index and the number of points."""

    def on_benchmark_start(self, strategy: Strategy, position: int, known_total: int) -> None:
        return None

    def on_batch(self, event: BatchEvent) -> None:
        return None

    def on_progress(self, progress: Progress) -> None:
        return None

    def on_benchmark_end(self, result: BenchmarkResult) -> None:
        return None

    def finish_report(self, report: RunReport) -> RunReport:
        """The run's report with what only this observer knows (the status writer: the pod's image), before it is
        judged and anyone hears of the run's end; it must never fail the run."""
        return report

    def on_run_end(self, report: RunReport) -> None:
        return None


class Observers(RunObserver):
    """Fans every event out to several observers."""

    def __init__(self, observers: list[RunObserver]) -> None:
        self.observers = observers

    def on_phase(self, phase: Phase) -> None:
        for observer in self.observers:
            observer.on_phase(phase)

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        for observer in self.observers:
            observer.on_engine_loaded(info, load_seconds)

    def on_sweep_point(self, values: dict[str, Any], position: int, total: int) -> None:
        for observer in self.observers:
            observer.on_sweep_point(values, position, total)

    def on_benchmark_start(self, strategy: Strategy, position: int, known_total: int) -> None:
        for observer in self.observers:
            observer.on_benchmark_start(strategy, position, known_total)

    def on_batch(self, event: BatchEvent) -> None:
        for observer in self.observers:
            observer.on_batch(event)

    def on_progress(self, progress: Progress) -> None:
        for observer in self.observers:
            observer.on_progress(progress)

    def on_benchmark_end(self, result: BenchmarkResult) -> None:
        for observer in self.observers:
            observer.on_benchmark_end(result)

    def finish_report(self, report: RunReport) -> RunReport:
        for observer in self.observers:
            report = observer.finish_report(report)
        return report

    def on_run_end(self, report: RunReport) -> None:
        for observer in self.observers:
            observer.on_run_end(report)
