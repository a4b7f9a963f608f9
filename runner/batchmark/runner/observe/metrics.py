"""Live Prometheus metrics of a run: a RunObserver that keeps the series, and the /metrics server.

The counters and histograms follow the report's own accounting: they count the requests the report
measures (warm-up and cool-down excluded), so ``batchmark_output_tokens_total`` at the end of a run equals the
report's ``tokens.output`` summed over its benchmarks, and a dashboard and the results file never disagree.
Every series carries ``benchmark`` (the run's name), ``run_id`` and ``batch_size`` (the backend's, which a sweep
changes between its points: as many values as the sweep has), and those of one engine's work ``replica`` (its
index among backend.replicas, "0" with one); no other label takes open-ended values.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from batchmark.runner import __version__, series
from batchmark.runner.config.run import RunConfig
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.results.report import BenchmarkResult
from batchmark.runner.run.events import BatchEvent, Phase, Progress, RunObserver

PHASES: Final[tuple[Phase, ...]] = ("loading", "warmup", "measuring", "cooldown", "done")
OUTCOMES: Final = ("success", "error", "incomplete")


def batch_size_buckets(batch_size: int) -> tuple[float, ...]:
    """Powers of two below the configured size, and the size itself: "how often was the batch full" is one
    bucket's share, and the bucket count stays logarithmic in the batch size."""
    bounds: list[float] = []
    bound = 1
    while bound < batch_size:
        bounds.append(float(bound))
        bound *= 2
    bounds.append(float(batch_size))
    return tuple(bounds)


@dataclass(frozen=True)
class _EngineSeries:
    """The series of one engine replica's work, bound to its labels at one sweep point."""

    requests: dict[str, Counter]
    prompt_tokens: Counter
    output_tokens: Counter
    latency: Histogram
    queue_wait: Histogram
    ttft: Histogram
    itl: Histogram
    batch_wait: Histogram
    batch_duration: Histogram
    batch_size: Histogram
    dispatch_overhead: Histogram
    engine_busy: Counter
    engine_steps: Counter


class MetricsObserver(RunObserver):
    """Keeps a run's live series in its own registry (never the process-global one: tests and the operator
    may hold several runs in one process)."""

    def __init__(self, config: RunConfig, run_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._run_labels = {"benchmark": config.name, "run_id": run_id}
        registry = self.registry
        sizes = [config.backend.batch_size, *(config.sweep.batch_size or [] if config.sweep is not None else [])]
        self._requests_family = series.counter(series.REQUESTS, registry)
        self._prompt_tokens_family = series.counter(series.PROMPT_TOKENS, registry)
        self._output_tokens_family = series.counter(series.OUTPUT_TOKENS, registry)
        self._latency_family = series.histogram(series.REQUEST_LATENCY, registry)
        self._queue_wait_family = series.histogram(series.QUEUE_WAIT, registry)
        self._ttft_family = series.histogram(series.TIME_TO_FIRST_TOKEN, registry)
        self._itl_family = series.histogram(series.INTER_TOKEN_LATENCY, registry)
        self._batch_wait_family = series.histogram(series.BATCH_WAIT, registry)
        self._batch_duration_family = series.histogram(series.BATCH_DURATION, registry)
        self._dispatch_overhead_family = series.histogram(series.DISPATCH_OVERHEAD, registry)
        self._engine_busy_family = series.counter(series.ENGINE_BUSY, registry)
        self._engine_steps_family = series.counter(series.ENGINE_STEPS, registry)
        self._batch_size_family = series.histogram(
            series.EFFECTIVE_BATCH_SIZE, registry, batch_size_buckets(max(sizes))
        )
        self._in_flight_family = series.gauge(series.REQUESTS_IN_FLIGHT, registry)
        self._queued_family = series.gauge(series.REQUESTS_QUEUED, registry)
        self._load_seconds_family = series.gauge(series.ENGINE_LOAD, registry)
        self._phase_family = series.gauge(series.PHASE, registry)
        run_info = series.info(series.RUN_INFO, registry)
        run_info.labels(**self._run_labels).info(
            {
                "model": config.backend.model,
                "backend": config.backend.kind,
                "engine": config.backend.engine,
                "batch_size": str(config.backend.batch_size),
                "version": __version__,
            }
        )
        self._phase: Phase = "loading"
        swept_replicas = (config.sweep.replicas or []) if config.sweep is not None else []
        self._replica_count = max([config.backend.replicas, *swept_replicas])
        self._bind(config.backend.batch_size)
        self.on_phase("loading")

    def _bind(self, batch_size: int) -> None:
        """Point every series at this batch size (a sweep's point); the previous point's series keep their values."""
        labels = {**self._run_labels, "batch_size": str(batch_size)}
        self._labels = labels
        self._engines: dict[int, _EngineSeries] = {}
        # Every replica's series exist from the start, at 0, so that increase() and rate() see their first events.
        for replica in range(self._replica_count):
            self._engine(replica)
        self._in_flight = self._in_flight_family.labels(**labels)
        self._queued = self._queued_family.labels(**labels)
        self._load_seconds = self._load_seconds_family.labels(**labels)
        self._phases = {name: self._phase_family.labels(**labels, phase=name) for name in PHASES}

    def on_sweep_point(self, values: dict[str, Any], position: int, total: int) -> None:
        batch_size = values.get("batch_size")
        if batch_size is not None:
            for child in self._phases.values():
                child.set(0)  # the phase moves to the new point's series
            self._in_flight.set(0)
            self._queued.set(0)
            self._bind(int(batch_size))
            self.on_phase(self._phase)

    def on_phase(self, phase: Phase) -> None:
        self._phase = phase
        for name, child in self._phases.items():
            child.set(1 if name == phase else 0)

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        self._load_seconds.set(load_seconds)

    def _engine(self, replica: int) -> _EngineSeries:
        """The series of one engine replica's work at the current point, made when it first reports."""
        found = self._engines.get(replica)
        if found is None:
            labels = {**self._labels, "replica": str(replica)}
            found = self._engines[replica] = _EngineSeries(
                requests={outcome: self._requests_family.labels(**labels, outcome=outcome) for outcome in OUTCOMES},
                prompt_tokens=self._prompt_tokens_family.labels(**labels),
                output_tokens=self._output_tokens_family.labels(**labels),
                latency=self._latency_family.labels(**labels),
                queue_wait=self._queue_wait_family.labels(**labels),
                ttft=self._ttft_family.labels(**labels),
                itl=self._itl_family.labels(**labels),
                batch_wait=self._batch_wait_family.labels(**labels),
                batch_duration=self._batch_duration_family.labels(**labels),
                batch_size=self._batch_size_family.labels(**labels),
                dispatch_overhead=self._dispatch_overhead_family.labels(**labels),
                engine_busy=self._engine_busy_family.labels(**labels),
                engine_steps=self._engine_steps_family.labels(**labels),
            )
        return found

    def on_batch(self, event: BatchEvent) -> None:
        report = event.report
        engine = self._engine(report.replica)
        succeeded = failed = prompt_tokens = output_tokens = 0
        for completion, enqueued_at, measured, dispatched_at in zip(
            report.completions, event.enqueued, event.measured, report.dispatch_times(), strict=True
        ):
            if enqueued_at is None or not measured:
                continue  # the aggregator leaves these out of the report; so do the series
            if completion.error is not None:
                failed += 1
                continue
            succeeded += 1
            prompt_tokens += completion.prompt_tokens
            output_tokens += completion.output_tokens
            engine.latency.observe(report.finished_at - enqueued_at)
            engine.queue_wait.observe(dispatched_at - enqueued_at)
            engine.batch_wait.observe(report.batch_wait(enqueued_at))
            first_token = completion.time_to_first_token(enqueued_at, dispatched_at)
            if not math.isnan(first_token):
                engine.ttft.observe(first_token)
            for interval in completion.stream.intervals if completion.stream is not None else ():
                engine.itl.observe(interval)  # about a microsecond each: one per output token
        # Counters move once per batch, by the batch's sums: a scrape never sees half a batch counted, and the
        # dispatcher pays one locked increment per series and batch rather than per request.
        if succeeded:
            engine.requests["success"].inc(succeeded)
            engine.prompt_tokens.inc(prompt_tokens)
            engine.output_tokens.inc(output_tokens)
        if failed:
            engine.requests["error"].inc(failed)
        if succeeded or failed:
            engine.engine_busy.inc(report.engine_busy)
            engine.engine_steps.inc(report.steps)
        if (succeeded or failed) and report.effective_batch_size > 0:
            engine.dispatch_overhead.observe(report.overhead_seconds)
            engine.batch_duration.observe(report.finished_at - report.started_at)
            engine.batch_size.observe(report.effective_batch_size)
        self._queued.set(report.queue_depth)

    def on_progress(self, progress: Progress) -> None:
        self._in_flight.set(progress.in_flight)
        self._queued.set(progress.queued)

    def on_benchmark_end(self, result: BenchmarkResult) -> None:
        if result.replicas:
            for replica in result.replicas:
                self._engine(replica.replica).requests["incomplete"].inc(replica.requests.incomplete)
        else:
            self._engine(0).requests["incomplete"].inc(result.requests.incomplete)
        self._in_flight.set(0)


class EngineNodeMetrics:
    """What a pod that runs only vLLM's workers of an engine over several pods exports: whether it holds its node
    of the engine (from the wait for node 0 to its workers' end). The chart's PodMonitor scrapes every benchmark
    pod's metrics port, theirs too; node 0's pod exports the run's series."""

    def __init__(self, benchmark: str, node: int) -> None:
        self.registry = CollectorRegistry()
        self._workers = series.gauge(series.ENGINE_NODE_WORKERS, self.registry).labels(benchmark, str(node))

    def holds_node(self, holding: bool) -> None:
        self._workers.set(1 if holding else 0)


class MetricsServer:
    """prometheus-client's /metrics server on one address, stopped (socket closed) by ``close``."""

    def __init__(self, registry: CollectorRegistry, port: int, address: str = "127.0.0.1") -> None:
        server, thread = start_http_server(port, addr=address, registry=registry)
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.address = address
        self.port: int = server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
