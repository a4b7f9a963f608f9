"""Runs the benchmarks of one config: issues requests by the profile, stops by the constraints."""

from __future__ import annotations

import datetime
import math
import platform
import random
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from batchmark.runner import __version__
from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.config.constraints import (
    MaxDurationConstraint,
    MaxErrorRateConstraint,
    MaxErrorsConstraint,
    MaxRequestsConstraint,
    MinRequestsConstraint,
    OverSaturationConstraint,
)
from batchmark.runner.config.data import SyntheticTextDataConfig
from batchmark.runner.config.profiles import SweepProfileConfig
from batchmark.runner.config.run import RunConfig
from batchmark.runner.config.sweep import WORKER_FIELDS, reloads_engine
from batchmark.runner.data.requests import DataSource, RecordsData, RequestSpec, SyntheticText, data_summary
from batchmark.runner.dispatch.backend import VllmPythonBatchBackend
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.replica_devices import DeviceSplitError, ReplicaDevices, split_devices
from batchmark.runner.dispatch.replicas import EngineReplicas, ReplicasReady
from batchmark.runner.dispatch.worker import WorkerFailed
from batchmark.runner.engines.registry import engine_entry, engine_packages, engine_summary, unloaded_engine_summary
from batchmark.runner.engines.tokens import tokens_for
from batchmark.runner.lifecycle.shutdown import StopFlag
from batchmark.runner.results.budget import RequestBudget, recommend, verdict
from batchmark.runner.results.cost import price
from batchmark.runner.results.decision import decide
from batchmark.runner.results.repeats import few_repeats_warning, repeated_benchmarks
from batchmark.runner.results.report import (
    BenchmarkResult,
    EngineLoad,
    EngineSummary,
    RegressionReport,
    RunReport,
    SaturationCheck,
    SearchSummary,
    SweepSummary,
)
from batchmark.runner.results.scaling import with_scaling_efficiency
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.events import BatchEvent, Observers, Phase, Progress, RunObserver
from batchmark.runner.run.profiles import Strategy, initial_strategies, sweep_rates
from batchmark.runner.run.saturation import OVER_SATURATION, SaturationDetector, import_trend_test
from batchmark.runner.run.search import METHOD as SEARCH_METHOD
from batchmark.runner.run.search import Measured, SearchOutcome, search

PROGRESS_INTERVAL = 0.25


class BenchmarkRunner:
    """Owns the engine worker for a whole run; ``start`` loads the engine, ``run`` times the benchmarks.

    Neither loses what was measured: a stop request (a signal) or the engine failing ends the run early, and
    ``run`` still returns the report of the benchmarks so far, marked incomplete with the reason.

    With a sweep, ``run`` goes through its points in order: the worker is told the new batch_size,
    batch_timeout or dispatch between points (the engine stays loaded), and only a point that changes the
    engine itself (vllm_config, request_format) gets a new worker, whose load is kept out of the timed phases.
    """

    def __init__(
        self,
        config: RunConfig,
        observers: list[RunObserver] | None = None,
        stop: StopFlag | None = None,
        judge: Callable[[RunReport], RegressionReport] | None = None,
    ) -> None:
        self.config = config
        # The run against its baseline (config.baseline), judged before the observers hear of its end.
        self.judge = judge
        self.observers = Observers(observers or [])
        self.stop = stop or StopFlag()
        self.failure: str | None = None  # why the engine failed, when it did
        self.run_id = uuid.uuid4().hex[:12]
        self.created_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.next_request_id = 0  # unique across a sweep's benchmarks, so late reports are recognised
        self.worker_cpu: list[float] = []  # each replica worker's harness CPU seconds, as its latest report said
        self._worker: EngineReplicas | None = None
        self._ready: ReplicasReady | None = None  # the first load: the report's engine
        self._load_started: float | None = None
        self._budget = RequestBudget(config.slo)
        self.points: list[dict[str, Any]] = config.sweep.points() if config.sweep is not None else [{}]
        self._backends = [config.point_backend(point) for point in self.points]
        self._data: DataSource = _data_source(config, self._backends)
        self._loaded: BackendConfig | None = None  # what the current worker's engine and settings are
        self._loads: list[EngineLoad] = []
        self._strategies: dict[int, list[Strategy]] = {}  # each point's strategies, as its repeats run them

    @property
    def stop_reason(self) -> str:
        return self.stop.reason

    def check(self) -> None:
        """The main process's cheap readiness check: loads nothing."""
        for backend in {_engine_key(backend): backend for backend in self._backends}.values():
            replica_devices(backend)
            VllmPythonBatchBackend(backend, self.config.data.seed).validate()

    def start(self) -> ReplicasReady | None:
        """Load the engine of the first point; None when a stop request came first or the engine failed to load
        (``failure``)."""
        self._load_started = time.monotonic()
        return self._load(0, first_benchmark=0)

    def _load(self, point: int, first_benchmark: int) -> ReplicasReady | None:
        self.close()
        if self.stop.is_set():
            return None
        backend = self._backends[point]
        self.observers.on_phase("loading")
        try:
            self._worker = EngineReplicas(backend, self.config.data.seed, replica_devices(backend))
            ready = self._worker.start(cancel=self.stop)
        except (WorkerFailed, DeviceSplitError) as error:
            self.failure = f"the engine failed to load: {error}"
            return None
        if ready is None:
            return None
        self._ready = self._ready or ready
        self._loaded = backend
        self.worker_cpu = [0.0] * self._worker.count  # new workers count from their load
        swept = {name: value for name, value in self.points[point].items() if reloads_engine(name)}
        self._loads.append(
            EngineLoad(
                swept=swept, load_seconds=ready.load_seconds, pid=ready.first.pid, first_benchmark=first_benchmark
            )
        )
        self.observers.on_engine_loaded(ready.first.info, ready.load_seconds)
        return ready

    def close(self, grace: float | None = None, hurry: StopFlag | None = None) -> None:
        """Stop the engine's process; ``grace`` (default: the worker's) bounds how long it may take by itself."""
        if self._worker is not None:
            if grace is None:
                self._worker.close(hurry=hurry)
            else:
                self._worker.close(grace=grace, hurry=hurry)
            self._worker = None

    def run(self) -> RunReport:
        """The profile's benchmarks at each sweep point, one after another, until done, stopped, or the engine
        fails."""
        results: list[BenchmarkResult] = []
        started = time.monotonic()
        reload_seconds = 0.0
        search_outcome = None
        if self.config.sweep is not None and self.config.sweep.batch_size_search is not None:
            search_outcome = self._search(results)
            schedule = []
        else:
            schedule = visit_order(
                [_engine_key(backend) for backend in self._backends], self.config.repeats, self.config.data.seed
            )
        for visit, (point, repeat) in enumerate(schedule):
            if self._ready is None or self._ended:
                break
            if visit > 0:
                reload_seconds += self._switch_to(point, len(results))
                if self._ended:
                    break
            if self.config.sweep is not None:
                self.observers.on_sweep_point(self.points[point], point, len(self.points))
                if self.config.sweep.warmup_requests and repeat == 0:
                    self._warm_up(self.config.sweep.warmup_requests)
            self._run_point(point, self._backends[point], results, repeat, visits_left=len(schedule) - visit - 1)
        report = self.observers.finish_report(
            self._report(results, time.monotonic() - started, reload_seconds, search_outcome)
        )
        if self.judge is not None:
            report = report.model_copy(update={"regression": self.judge(report)})
        self.observers.on_phase("done")
        self.observers.on_run_end(report)
        return report

    @property
    def _ended(self) -> bool:
        return self.stop.is_set() or self.failure is not None

    def _switch_to(self, point: int, first_benchmark: int) -> float:
        """Make the worker fit the point; returns the load time when the engine had to be reloaded."""
        assert self._worker is not None
        assert self._loaded is not None
        backend = self._backends[point]
        if _engine_key(backend) != _engine_key(self._loaded):
            ready = self._load(point, first_benchmark)
            return ready.load_seconds if ready is not None else 0.0
        if _worker_settings(backend) != _worker_settings(self._loaded):
            try:
                self._worker.reconfigure(backend.batch_size, backend.batch_timeout, backend.dispatch)
            except WorkerFailed as error:
                self.failure = f"the engine failed: {error}"
            self._loaded = backend
        return 0.0

    def _run_point(
        self, point: int, backend: BackendConfig, results: list[BenchmarkResult], repeat: int, visits_left: int
    ) -> None:
        """The profile's benchmarks at one point; a repeat runs the strategies (rates included) of the first."""
        profile = self.config.profile
        repeated = self._strategies.get(point)
        strategies = list(repeated) if repeated is not None else initial_strategies(profile)
        per_point = profile.sweep_size if isinstance(profile, SweepProfileConfig) else len(strategies)
        adds_rates = isinstance(profile, SweepProfileConfig) and repeated is None
        offset = len(results)
        position = 0
        while position < len(strategies) and not self._ended:
            strategy = strategies[position]
            is_last = visits_left == 0 and position == len(strategies) - 1 and not (adds_rates and position == 1)
            known_total = offset + len(strategies) + visits_left * per_point
            self.observers.on_benchmark_start(strategy, offset + position, known_total)
            result = self._run_one(strategy, drain_after=not is_last, point=point, backend=backend)
            results.append(result.model_copy(update={"point": point, "repeat": repeat}))
            self.observers.on_benchmark_end(result)
            if result.stop_reason == OVER_SATURATION:
                del strategies[position + 1 :]  # a sweep stops at the knee: higher rates would saturate it too
            if isinstance(profile, SweepProfileConfig) and adds_rates and position == 1 and not self._ended:
                strategies += sweep_rates(
                    profile,
                    results[offset].throughput.requests_per_second,
                    results[offset + 1].throughput.requests_per_second,
                )
            position += 1
        if repeated is None and not self._ended:
            self._strategies[point] = strategies

    def _warm_up(self, count: int) -> None:
        """Requests through the engine before a point's benchmarks, waited for and left out of every result."""
        assert self._worker is not None
        first = self.next_request_id
        self.next_request_id += count
        now = time.monotonic()
        pending = set(range(first, first + count))
        try:
            self._worker.submit([(self._data.spec(request_id), now) for request_id in sorted(pending)])
            while pending and not self._ended:
                for message in self._worker.receive(PROGRESS_INTERVAL):
                    if isinstance(message, BatchReport):
                        pending.difference_update(completion.request_id for completion in message.completions)
        except WorkerFailed as error:
            self.failure = f"the engine failed: {error}"

    def _search(self, results: list[BenchmarkResult]) -> SearchOutcome:
        """The batch-size search: each point it asks for is measured once when asked; with repeats, the points it
        measured then get their other repeats in interleaved rounds (each round every point once, shuffled with
        the seed, as a list sweep's), so drift spreads over all of them, and the best is chosen over every
        repeat."""
        budget = bool(self.config.slo)

        def measure(point: int) -> Measured | None:
            if not self._visit(point, results, repeat=0, visits_left=1):
                return None
            return _measured([result for result in results if result.point == point], budget)

        outcome = search(len(self.points), budget, measure)
        shuffle = random.Random(self.config.data.seed)
        rounds = [list(outcome.visited) for _ in range(1, self.config.repeats)]
        for round_order in rounds:
            shuffle.shuffle(round_order)
        schedule = [(point, repeat) for repeat, round_order in enumerate(rounds, start=1) for point in round_order]
        for visit, (point, repeat) in enumerate(schedule):
            if not self._visit(point, results, repeat, visits_left=len(schedule) - visit - 1):
                return outcome
        if schedule:
            measured = {point: _measured([r for r in results if r.point == point], budget) for point in outcome.visited}
            met = [point for point, figures in measured.items() if figures.met]
            outcome.best = max(met, key=lambda point: measured[point].output_tokens_per_second) if met else None
        return outcome

    def _visit(self, point: int, results: list[BenchmarkResult], repeat: int, visits_left: int) -> bool:
        """One repeat of a point the search asked for (warmed up on its first); False when the run ended."""
        if self._ready is None or self._ended:
            return False
        self._switch_to(point, len(results))
        if self._ended:
            return False
        self.observers.on_sweep_point(self.points[point], point, len(self.points))
        assert self.config.sweep is not None
        if self.config.sweep.warmup_requests and repeat == 0:
            self._warm_up(self.config.sweep.warmup_requests)
        self._run_point(point, self._backends[point], results, repeat, visits_left=visits_left)
        return not self._ended

    def _report(
        self,
        results: list[BenchmarkResult],
        wall: float,
        reload_seconds: float,
        search_outcome: SearchOutcome | None = None,
    ) -> RunReport:
        results = with_scaling_efficiency(results, [self._backends[result.point].replicas for result in results])
        complete = self._ready is not None and not self._ended and not any(result.interrupted for result in results)
        stop_reason = None
        if not complete:
            stop_reason = self.failure or self.stop_reason
            if self._ready is None and self.failure is None:
                stop_reason += " before the engine had loaded"
        sweep = None
        if self.config.sweep is not None:
            sweep = SweepSummary(
                fields=[name for name, _ in self.config.sweep.axes()],
                points=len(search_outcome.visited) if search_outcome is not None else len(self.points),
                engine_loads=self._loads,
                wall_seconds=wall,
                timed_seconds=sum(result.duration for result in results),
                load_seconds=reload_seconds,
                search=None
                if search_outcome is None
                else SearchSummary(
                    method=SEARCH_METHOD,
                    candidates=[point["batch_size"] for point in self.points],
                    visited=[self.points[index]["batch_size"] for index in search_outcome.visited],
                    best=self.points[search_outcome.best]["batch_size"] if search_outcome.best is not None else None,
                ),
            )
        budget = bool(self.config.slo)
        recommendation = recommend(results, budget) if budget or len(results) > 1 else None
        repeated = None
        repeats_warning = None
        if self.config.repeats > 1:
            repeated = repeated_benchmarks(results, self.config.slo)
            latency_name = next(iter(self.config.slo), "request_latency_p99")
            recommendation = decide(repeated, results, budget, latency_name) if budget or len(repeated) > 1 else None
            repeats_warning = few_repeats_warning(repeated)
        return RunReport(
            name=self.config.name,
            run_id=self.run_id,
            batchmark_version=__version__,
            created_at=self.created_at,
            engine=self._engine_summary(),
            environment=environment(),
            config=self.config.model_dump(mode="json"),
            data=data_summary(self.config.data, self._data),
            dispatch=self.config.backend.dispatch_mode,
            complete=complete,
            stop_reason=stop_reason,
            benchmarks=results,
            sweep=sweep,
            recommendation=recommendation,
            repeats=self.config.repeats,
            repeated=repeated,
            repeats_warning=repeats_warning,
        )

    def _engine_summary(self) -> EngineSummary:
        if self._ready is None:
            loading = time.monotonic() - self._load_started if self._load_started is not None else 0.0
            return unloaded_engine_summary(self.config.backend, loading)
        summary = engine_summary(self._ready.first.info, self._ready.load_seconds)
        if len(self._ready.replicas) == 1:
            return summary
        devices = [share.describe() for share in self._ready.devices]
        return summary.model_copy(update={"replicas": len(devices), "replica_devices": devices})

    def _run_one(self, strategy: Strategy, drain_after: bool, point: int, backend: BackendConfig) -> BenchmarkResult:
        assert self._worker is not None
        execution = _Execution(self, strategy)
        result = execution.run()
        if drain_after and execution.in_flight and not self._ended:
            try:
                self._worker.drain()
            except WorkerFailed as error:
                self.failure = f"the engine failed: {error}"
        update: dict[str, Any] = {"swept": dict(self.points[point]), "batch_size": backend.batch_size}
        if self.config.slo:
            aggregator = execution.aggregator
            update["slo"] = verdict(self.config.slo, result, aggregator.good_requests, aggregator.good_output_tokens)
        if self.config.cost is not None:
            update["cost"] = price(self.config.cost, backend.vllm_config, result.throughput, backend.replicas)
        return result.model_copy(update=update)


def _measured(runs: list[BenchmarkResult], budget: bool) -> Measured:
    """A searched point over its repeats so far: met the budget in every one, and its mean output tokens/s."""
    rates = [result.throughput.output_tokens_per_second for result in runs]
    met = all(result.slo is not None and result.slo.met for result in runs) if budget else True
    return Measured(met=met, output_tokens_per_second=sum(rates) / len(rates))


def visit_order(engine_keys: list[str], repeats: int, seed: int) -> list[tuple[int, int]]:
    """(point, repeat) in run order: the points that share an engine load (consecutive, as a sweep orders them)
    are measured in rounds, each round every point once, so drift spreads over all of them instead of piling
    onto one. The first round keeps the sweep's order; later rounds are shuffled with the seed."""
    shuffle = random.Random(seed)
    order: list[tuple[int, int]] = []
    start = 0
    while start < len(engine_keys):
        end = start
        while end < len(engine_keys) and engine_keys[end] == engine_keys[start]:
            end += 1
        group = list(range(start, end))
        for repeat in range(repeats):
            round_order = list(group)
            if repeat > 0:
                shuffle.shuffle(round_order)
            order.extend((point, repeat) for point in round_order)
        start = end
    return order


def replica_devices(backend: BackendConfig) -> list[ReplicaDevices]:
    """Each of the backend's replicas' devices here (DeviceSplitError: too few for them)."""
    ranks = engine_entry(backend.engine).pod.gpus(backend.vllm_config, "backend.vllm_config")
    return split_devices(backend.replicas, ranks)


def _engine_key(backend: BackendConfig) -> str:
    """Everything about the backend that shapes the loaded engine (all but the worker's own settings)."""
    return backend.model_dump_json(exclude=set(WORKER_FIELDS))


def _worker_settings(backend: BackendConfig) -> tuple[Any, ...]:
    return tuple(getattr(backend, name) for name in WORKER_FIELDS)


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
        saturation = config.constraint("over_saturation")
        # Judged where requests come at a rate: a sweep's synchronous and throughput benchmarks wait for requests.
        self.saturation = (
            saturation if isinstance(saturation, OverSaturationConstraint) and strategy.rate is not None else None
        )
        self.detector: SaturationDetector | None = None
        if self.saturation is not None:
            import_trend_test()  # before the clock starts: it takes seconds the first time
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
        aggregator = self.aggregator = Aggregator(
            start,
            time.time(),
            self.runner.next_request_id,
            self.window,
            self.runner.config.sample_requests,
            worker_cpu_start=self.runner.worker_cpu,
            budget=self.runner._budget,
            replica_devices=self.worker.device_names if self.worker.count > 1 else None,
        )
        deadline = start + self.max_seconds if self.max_seconds is not None else math.inf
        if self.saturation is not None:
            watch = self.saturation
            self.detector = SaturationDetector(start, watch.seconds, watch.segments, watch.significance, watch.checks)
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
            self._receive(aggregator, max(timeout, 0.0))
            now = time.monotonic()
            end = now
            if self.detector is not None:
                self.detector.in_flight(now, len(self.in_flight))
            stop_reason = self._stop_reason(aggregator, now, deadline, cap)
        end = time.monotonic() if self.runner.failure is not None else end
        self.observers.on_progress(self._progress(aggregator, end - start))
        interrupted = stop_reason == "interrupted" or self.runner.failure is not None
        reason = self.runner.failure or self.runner.stop_reason
        result = aggregator.finish(
            end=end,
            stop_reason=reason if interrupted else str(stop_reason),
            incomplete=len(self.in_flight),
            interrupted=interrupted,
            strategy=self.strategy,
            incomplete_by_replica=self.worker.in_flight if self.worker.count > 1 else None,
        )
        return result.model_copy(update={"saturation": self._saturation_check(stop_reason == OVER_SATURATION)})

    def _saturation_check(self, saturated: bool) -> SaturationCheck | None:
        detector = self.detector
        if detector is None or detector.verdict is None:
            return None
        return SaturationCheck(
            saturated=saturated,
            **detector.verdict._asdict(),
            significance=detector.significance,
            window_seconds=detector.window,
        )

    def _receive(self, aggregator: Aggregator, timeout: float) -> None:
        """What the worker reports within ``timeout``, folded in."""
        try:
            messages = self.worker.receive(timeout)
        except WorkerFailed as error:
            # What completed is kept; what was in flight counts as incomplete.
            self.runner.failure = f"the engine failed: {error}"
            return
        for message in messages:
            if isinstance(message, BatchReport):
                self._on_batch(message, aggregator)

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
                if self.detector is not None:
                    self.detector.finished(report.finished_at, report.finished_at - enqueued_at)
                failed = completion.error is not None
                self.errors_total += failed
                self.recent_outcomes.append(failed)
        self.queued = report.queue_depth
        worker_cpu = self.runner.worker_cpu
        worker_cpu[report.replica] = max(worker_cpu[report.replica], report.harness_cpu)
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
        if self.detector is not None and self.detector.saturated(now):
            return OVER_SATURATION
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


def _data_source(config: RunConfig, backends: list[BackendConfig]) -> DataSource:
    """The requests' source; reading the user's data raises DataError before anything else happens."""
    if isinstance(config.data, SyntheticTextDataConfig):
        return SyntheticText(config.data)
    tokens = tokens_for(backends, engine_entry(backends[0].engine).count_tokens)
    return RecordsData(config.data, tokens.count, tokens.max_model_len, tokens.tokenizer)


def environment() -> dict[str, Any]:
    """Versions that explain a result."""
    import importlib.metadata  # noqa: PLC0415 - only needed once per run

    versions: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    for package in (*engine_packages(), "numpy", "pydantic"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
