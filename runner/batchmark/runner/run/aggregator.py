"""Turns batch reports into a benchmark's results as they arrive: bounded memory however long the run."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from batchmark.runner.config.profiles import TransientPhaseConfig
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import Completion
from batchmark.runner.results.budget import RequestBudget
from batchmark.runner.results.report import (
    BenchmarkResult,
    Distributions,
    ReplicaResult,
    RequestCounts,
    RequestSample,
    Throughput,
    TimelinePoint,
)
from batchmark.runner.results.scaling import replicas_summary
from batchmark.runner.results.stats import EXACT_LIMIT, Distribution
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy

TIMELINE_BUCKETS = 512
TIMELINE_FIRST_WIDTH = 0.1


@dataclass
class _BatchValues:
    """One batch's measured requests, gathered before they are folded into the distributions at once."""

    latency: list[float] = field(default_factory=list)
    queue_wait: list[float] = field(default_factory=list)
    batch_wait: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    completed: int = 0
    errored: int = 0
    produced: int = 0


@dataclass(frozen=True)
class Window:
    """Which requests are measured: warm-up and cool-down, resolved against the run's constraints."""

    warmup_requests: int = 0
    warmup_seconds: float = 0.0
    cooldown_requests: int = 0
    cooldown_seconds: float = 0.0
    total_requests: int | None = None  # max_requests, when set
    total_seconds: float | None = None  # max_duration, when set

    @classmethod
    def resolve(
        cls,
        warmup: TransientPhaseConfig | None,
        cooldown: TransientPhaseConfig | None,
        max_requests: int | None,
        max_seconds: float | None,
    ) -> Window:
        warm_requests, warm_seconds = _phase(warmup, max_requests, max_seconds)
        cool_requests, cool_seconds = _phase(cooldown, max_requests, max_seconds)
        return cls(warm_requests, warm_seconds, cool_requests, cool_seconds, max_requests, max_seconds)

    def measured(self, index: int, enqueued: float, completed: float, start: float) -> bool:
        if index < self.warmup_requests or enqueued < start + self.warmup_seconds:
            return False
        if self.total_requests is not None and index >= self.total_requests - self.cooldown_requests:
            return False
        return not (
            self.total_seconds is not None
            and self.cooldown_seconds > 0
            and completed > start + self.total_seconds - self.cooldown_seconds
        )


def _phase(
    phase: TransientPhaseConfig | None, max_requests: int | None, max_seconds: float | None
) -> tuple[int, float]:
    return (0, 0.0) if phase is None else phase.resolve(max_requests, max_seconds)


class Timeline:
    """Per-bucket counters whose bucket width doubles whenever the run outgrows them."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.width = TIMELINE_FIRST_WIDTH
        self.completed = [0] * TIMELINE_BUCKETS
        self.errored = [0] * TIMELINE_BUCKETS
        self.output_tokens = [0] * TIMELINE_BUCKETS
        self.prompt_tokens = [0] * TIMELINE_BUCKETS
        self.busy = [0.0] * TIMELINE_BUCKETS
        self.used = 0

    def _bucket(self, when: float) -> int:
        index = max(0, int((when - self.start) / self.width))
        while index >= TIMELINE_BUCKETS:
            self._coarsen()
            index = max(0, int((when - self.start) / self.width))
        self.used = max(self.used, index + 1)
        return index

    def _coarsen(self) -> None:
        half = TIMELINE_BUCKETS // 2
        for counts in (self.completed, self.errored, self.output_tokens, self.prompt_tokens):
            counts[:] = [counts[i] + counts[i + 1] for i in range(0, TIMELINE_BUCKETS, 2)] + [0] * half
        self.busy[:] = [self.busy[i] + self.busy[i + 1] for i in range(0, TIMELINE_BUCKETS, 2)] + [0.0] * half
        self.width *= 2
        self.used = (self.used + 1) // 2

    def add_completions(
        self, when: float, completed: int, errored: int, output_tokens: int, prompt_tokens: int = 0
    ) -> None:
        index = self._bucket(when)
        self.completed[index] += completed
        self.errored[index] += errored
        self.output_tokens[index] += output_tokens
        self.prompt_tokens[index] += prompt_tokens

    def add_busy(self, begin: float, end: float) -> None:
        begin = max(begin, self.start)
        if end <= begin:
            return
        last = self._bucket(end)
        first = min(last, max(0, int((begin - self.start) / self.width)))
        for index in range(first, last + 1):
            bucket_start = self.start + index * self.width
            overlap = min(end, bucket_start + self.width) - max(begin, bucket_start)
            if overlap > 0:
                self.busy[index] += overlap

    def points(self) -> list[TimelinePoint]:
        return [
            TimelinePoint(
                start=index * self.width,
                width=self.width,
                completed=self.completed[index],
                errored=self.errored[index],
                output_tokens=self.output_tokens[index],
                prompt_tokens=self.prompt_tokens[index],
                engine_busy=self.busy[index],
            )
            for index in range(self.used)
        ]


class BusyTime:
    """An engine's busy intervals, clipped to the measured window: settled as measured completions pass their end,
    so that memory holds only the intervals still open to the window's end."""

    def __init__(self) -> None:
        self._settled = 0.0
        self._pending: deque[tuple[float, float]] = deque()

    def add(self, begin: float, end: float) -> None:
        self._pending.append((begin, end))

    def settle(self, until: float, measure_start: float) -> None:
        while self._pending and self._pending[0][1] <= until:
            begin, end = self._pending.popleft()
            self._settled += max(0.0, end - max(begin, measure_start))

    def total(self, measure_start: float, measure_end: float) -> float:
        return self._settled + sum(
            max(0.0, min(stop, measure_end) - max(begin, measure_start)) for begin, stop in self._pending
        )


@dataclass
class _ReplicaFigures:
    """One replica's measured totals, folded in with the benchmark's."""

    devices: str
    latency: Distribution
    busy: BusyTime = field(default_factory=BusyTime)
    completed: int = 0
    errored: int = 0
    in_flight: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    batches: int = 0
    batch_size_total: int = 0


class Aggregator:
    """Results of one benchmark, folded in batch by batch."""

    def __init__(
        self,
        start: float,
        started_wall: float,
        first_id: int,
        window: Window,
        sample_requests: int,
        budget: RequestBudget | None = None,
        worker_cpu_start: Sequence[float] = (),
        replica_devices: list[str] | None = None,
    ) -> None:
        self.start = start
        self.budget = budget if budget else None
        self.good_requests = 0  # measured successes that met every per-request target (goodput)
        self.good_output_tokens = 0
        self.first_id = first_id
        self.started_wall = started_wall
        self.window = window
        self.sample_requests = sample_requests
        self.measure_start: float | None = start + window.warmup_seconds if window.warmup_requests == 0 else None
        self.last_measured_completion: float | None = None
        self.completed = 0
        self.errored = 0
        self.excluded = 0
        self.prompt_tokens_total = 0
        self.output_tokens_total = 0
        self.batches = 0
        self.batch_sizes: Counter[int] = Counter()  # exact, and bounded by batch_size: the report's histogram
        self.distributions = {name: Distribution() for name in Distributions.model_fields}
        self.timeline = Timeline(start)
        self.successful_samples: list[RequestSample] = []
        self.errored_samples: list[RequestSample] = []
        self._busy = BusyTime()
        # With several replicas (their devices, in order): each one's figures beside the aggregate's.
        devices = replica_devices or [""]
        limit = max(EXACT_LIMIT // len(devices), 10_000)
        self._replicas = [_ReplicaFigures(name, Distribution(limit)) for name in devices] if replica_devices else []
        self.engines = len(devices)
        self.engine_steps = 0
        self.finished_requests = 0  # measured or not: what the harness's CPU served
        # The harness's CPU: this process's (it runs no engine) and the worker's own threads' (reported by it).
        self._main_cpu_start = time.process_time()
        # Each replica's worker reports the CPU its own threads spent since its engine loaded, a running total.
        self._worker_cpu_start = list(worker_cpu_start) or [0.0] * self.engines
        self._worker_cpus = list(self._worker_cpu_start)

    def on_issue(self, request_id: int, enqueued: float) -> None:
        if self.measure_start is None and request_id - self.first_id == self.window.warmup_requests:
            self.measure_start = enqueued

    def is_measured(self, request_id: int, enqueued: float, completed: float) -> bool:
        return self.window.measured(request_id - self.first_id, enqueued, completed, self.start)

    def on_batch(self, event: BatchEvent) -> None:
        """Fold in one batch."""
        report = event.report
        # Only the engine's own calls count as busy; they begin when the dispatcher takes the batch.
        busy_end = report.started_at + report.engine_busy
        self._busy.add(report.started_at, busy_end)
        replica = self._replicas[report.replica] if self._replicas else None
        if replica is not None:
            replica.busy.add(report.started_at, busy_end)
        self.timeline.add_busy(report.started_at, busy_end)
        self._worker_cpus[report.replica] = max(self._worker_cpus[report.replica], report.harness_cpu)
        self.finished_requests += sum(enqueued_at is not None for enqueued_at in event.enqueued)
        batch = _BatchValues()
        size = len(report.completions)
        for completion, enqueued_at, measured, entered in zip(
            report.completions, event.enqueued, event.measured, report.dispatch_times(), strict=True
        ):
            if enqueued_at is None:
                continue  # a late report of a request from an earlier benchmark of a sweep
            if not measured:
                self.excluded += 1
                continue
            if completion.error is not None:
                batch.errored += 1
                self._sample(self.errored_samples, completion, report, enqueued_at, size, entered)
                continue
            self._add_success(batch, completion, report, enqueued_at, entered)
            self._sample(self.successful_samples, completion, report, enqueued_at, size, entered)
        self.timeline.add_completions(
            report.finished_at, batch.completed, batch.errored, batch.produced, sum(batch.prompt_tokens)
        )
        if batch.completed + batch.errored:
            self._fold(batch, report)
            if replica is not None:
                self._fold_replica(replica, batch, report)

    def _fold_replica(self, replica: _ReplicaFigures, batch: _BatchValues, report: BatchReport) -> None:
        replica.completed += batch.completed
        replica.errored += batch.errored
        replica.output_tokens += batch.produced
        replica.prompt_tokens += sum(batch.prompt_tokens)
        replica.latency.extend(batch.latency)
        replica.busy.settle(report.finished_at, self._measure_start())
        if report.effective_batch_size > 0:
            replica.batches += 1
            replica.batch_size_total += report.effective_batch_size

    def _add_success(
        self, batch: _BatchValues, completion: Completion, report: BatchReport, enqueued_at: float, entered: float
    ) -> None:
        """One successful measured request's figures, and whether it met the budget."""
        batch.completed += 1
        batch.produced += completion.output_tokens
        latency = report.finished_at - enqueued_at
        queue_wait = entered - enqueued_at
        batch_wait = report.batch_wait(enqueued_at)
        batch.latency.append(latency)
        batch.queue_wait.append(queue_wait)
        batch.batch_wait.append(batch_wait)
        batch.prompt_tokens.append(completion.prompt_tokens)
        batch.output_tokens.append(completion.output_tokens)
        request_ttft = completion.time_to_first_token(enqueued_at, entered)
        request_tpot = completion.time_per_output_token()
        if not math.isnan(request_ttft):
            batch.ttft.append(request_ttft)
        if not math.isnan(request_tpot):
            batch.tpot.append(request_tpot)
        if completion.stream is not None:
            batch.itl.extend(completion.stream.intervals)  # read on the stream, token by token
        if self.budget is not None and self.budget.meets(
            {
                "request_latency": latency,
                "queue_wait": queue_wait,
                "batch_wait": batch_wait,
                "time_to_first_token": request_ttft,
                # One output token has no time per output token: nothing to miss.
                "time_per_output_token": request_tpot if completion.output_tokens > 1 else 0.0,
            }
        ):
            self.good_requests += 1
            self.good_output_tokens += completion.output_tokens

    def _fold(self, batch: _BatchValues, report: BatchReport) -> None:
        """A batch with measured requests into the totals and the distributions, at once."""
        self.batches += 1
        self.completed += batch.completed
        self.errored += batch.errored
        self.output_tokens_total += batch.produced
        self.prompt_tokens_total += sum(batch.prompt_tokens)
        # Replicas' reports arrive in the order they were read, not the order they finished.
        last = self.last_measured_completion
        self.last_measured_completion = report.finished_at if last is None else max(last, report.finished_at)
        self._settle_busy(report.finished_at)
        values = self.distributions
        values["request_latency"].extend(batch.latency)
        values["queue_wait"].extend(batch.queue_wait)
        values["batch_wait"].extend(batch.batch_wait)
        values["time_to_first_token"].extend(batch.ttft)
        values["time_per_output_token"].extend(batch.tpot)
        values["inter_token_latency"].extend(batch.itl)
        values["prompt_tokens"].extend(batch.prompt_tokens)
        values["output_tokens"].extend(batch.output_tokens)
        self.engine_steps += report.steps
        batch_size = report.effective_batch_size
        if batch_size > 0:
            values["dispatch_overhead"].add(report.overhead_seconds)
            values["batch_duration"].add(report.finished_at - report.started_at)
            values["batch_size"].add(batch_size)
            self.batch_sizes[batch_size] += 1

    def _settle_busy(self, until: float) -> None:
        self._busy.settle(until, self._measure_start())

    def _measure_start(self) -> float:
        return self.measure_start if self.measure_start is not None else self.start

    def _sample(
        self,
        into: list[RequestSample],
        completion: Completion,
        report: BatchReport,
        enqueued_at: float,
        size: int,
        dispatched_at: float,
    ) -> None:
        if len(into) >= self.sample_requests:
            return
        timings = completion.timings
        into.append(
            RequestSample(
                request_id=completion.request_id,
                batch_id=report.batch_id,
                batch_size=size,
                enqueued=enqueued_at - self.start,
                dispatched=dispatched_at - self.start,
                completed=report.finished_at - self.start,
                prompt_tokens=completion.prompt_tokens,
                output_tokens=completion.output_tokens,
                error=completion.error,
                engine_queued=_finite(timings.queued),
                engine_prefill=_finite(timings.prefill),
                engine_decode=_finite(timings.decode),
            )
        )

    def finish(
        self,
        *,
        end: float,
        stop_reason: str,
        incomplete: int,
        interrupted: bool,
        strategy: Strategy,
        incomplete_by_replica: list[int] | None = None,
    ) -> BenchmarkResult:
        measure_start = self.measure_start if self.measure_start is not None else self.start
        measure_end = self.last_measured_completion if self.last_measured_completion is not None else end
        if stop_reason == "max_duration" and self.window.total_seconds is not None:
            measure_end = self.start + self.window.total_seconds - self.window.cooldown_seconds
        measured = max(measure_end - measure_start, 0.0)
        # With several replicas the window holds that many engines' time.
        busy = self._busy.total(measure_start, measure_end) / self.engines

        measured_requests = self.completed + self.errored
        worker_cpu = sum(self._worker_cpus) - sum(self._worker_cpu_start)
        harness_cpu = time.process_time() - self._main_cpu_start + worker_cpu
        replicas = [
            self._replica_result(index, figures, measure_start, measure_end, incomplete_by_replica)
            for index, figures in enumerate(self._replicas)
        ]

        return BenchmarkResult(
            strategy=strategy.label,
            kind=strategy.kind,
            rate=strategy.rate,
            max_concurrency=strategy.max_concurrency,
            stop_reason=stop_reason,
            interrupted=interrupted,
            started_at=self.started_wall,
            duration=end - self.start,
            measured_duration=measured,
            measured_from=measure_start - self.start,
            requests=RequestCounts(
                completed=self.completed, errored=self.errored, incomplete=incomplete, excluded=self.excluded
            ),
            tokens={"prompt": self.prompt_tokens_total, "output": self.output_tokens_total},
            throughput=Throughput.over(measured, self.completed, self.output_tokens_total, self.prompt_tokens_total),
            engine_utilization=min(1.0, busy / measured) if measured > 0 else 0.0,
            engine_steps=self.engine_steps,
            engine_steps_per_1000_requests=(
                1000 * self.engine_steps / measured_requests if measured_requests and self.engine_steps else None
            ),
            harness_cpu_seconds=harness_cpu,
            harness_cpu_per_request=harness_cpu / self.finished_requests if self.finished_requests else None,
            batches=self.batches,
            batch_size_histogram=sorted(self.batch_sizes.items()),
            distributions=Distributions(
                **{name: distribution.summary() for name, distribution in self.distributions.items()}
            ),
            sketches={name: distribution.sketch() for name, distribution in self.distributions.items()},
            timeline=self.timeline.points(),
            samples=self.successful_samples + self.errored_samples,
            replicas=replicas or None,
            replica_summary=replicas_summary(replicas) if replicas else None,
        )

    def _replica_result(
        self,
        index: int,
        figures: _ReplicaFigures,
        measure_start: float,
        measure_end: float,
        incomplete_by_replica: list[int] | None,
    ) -> ReplicaResult:
        measured = max(measure_end - measure_start, 0.0)
        busy = figures.busy.total(measure_start, measure_end)
        return ReplicaResult(
            replica=index,
            devices=figures.devices,
            requests=RequestCounts(
                completed=figures.completed,
                errored=figures.errored,
                incomplete=incomplete_by_replica[index] if incomplete_by_replica else 0,
            ),
            tokens={"prompt": figures.prompt_tokens, "output": figures.output_tokens},
            throughput=Throughput.over(measured, figures.completed, figures.output_tokens, figures.prompt_tokens),
            engine_utilization=min(1.0, busy / measured) if measured > 0 else 0.0,
            batches=figures.batches,
            mean_batch_size=figures.batch_size_total / figures.batches if figures.batches else None,
            request_latency=figures.latency.summary(),
        )


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value
