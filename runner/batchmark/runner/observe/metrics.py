"""Live Prometheus metrics of a run: a RunObserver that keeps the series, and the /metrics server.

The counters and histograms follow the report's own accounting: they count the requests the report
measures (warm-up and cool-down excluded), so ``batchmark_output_tokens_total`` at the end of a run equals the
report's ``tokens.output`` summed over its benchmarks, and a dashboard and the results file never disagree.
Every series carries ``benchmark`` (the run's name), ``run_id`` and ``batch_size`` (the backend's, which a sweep
changes between its points: as many values as the sweep has); no other label takes open-ended values.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from batchmark.runner import __version__
from batchmark.runner.config.run import RunConfig
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.results.report import BenchmarkResult
from batchmark.runner.run.events import BatchEvent, Phase, Progress, RunObserver

PHASES: Final[tuple[Phase, ...]] = ("loading", "warmup", "measuring", "cooldown", "done")
OUTCOMES: Final = ("success", "error", "incomplete")
# Waits and latencies from 1 ms (a tiny batch on a fast GPU) to 1 h (a huge offline batch), roughly three
# buckets per decade, so a histogram_quantile() stays within a factor of about 2 anywhere in that range.
SECONDS_BUCKETS: Final[tuple[float, ...]] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    1800.0,
    3600.0,
)
# The harness's own time per batch: tens of microseconds when all is well, milliseconds when it is not.
OVERHEAD_BUCKETS: Final[tuple[float, ...]] = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


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


class MetricsObserver(RunObserver):
    """Keeps a run's live series in its own registry (never the process-global one: tests and the operator
    may hold several runs in one process)."""

    def __init__(self, config: RunConfig, run_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._run_labels = {"benchmark": config.name, "run_id": run_id}
        names = [*self._run_labels, "batch_size"]
        registry = self.registry
        sizes = [config.backend.batch_size, *(config.sweep.batch_size or [] if config.sweep is not None else [])]

        def counter(name: str, documentation: str, extra: Sequence[str] = ()) -> Counter:
            return Counter(name, documentation, [*names, *extra], registry=registry)

        def histogram(name: str, documentation: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, documentation, names, buckets=buckets, registry=registry)

        def gauge(name: str, documentation: str, extra: Sequence[str] = ()) -> Gauge:
            return Gauge(name, documentation, [*names, *extra], registry=registry)

        self._requests_family = counter(
            "batchmark_requests",
            "Measured requests by outcome: success, error, or incomplete (in flight when a benchmark stopped).",
            ["outcome"],
        )
        self._prompt_tokens_family = counter(
            "batchmark_prompt_tokens", "Prompt tokens of measured successful requests, as the engine counted."
        )
        self._output_tokens_family = counter(
            "batchmark_output_tokens", "Tokens generated for measured successful requests."
        )
        self._latency_family = histogram(
            "batchmark_request_latency_seconds", "Enqueue to completion of measured requests.", SECONDS_BUCKETS
        )
        self._queue_wait_family = histogram(
            "batchmark_queue_wait_seconds", "Enqueue to dispatch into the engine.", SECONDS_BUCKETS
        )
        self._batch_wait_family = histogram(
            "batchmark_batch_wait_seconds",
            "Enqueue until the request's micro-batch was complete (filled or timed out).",
            SECONDS_BUCKETS,
        )
        self._batch_duration_family = histogram(
            "batchmark_batch_duration_seconds", "One generate() call of a measured micro-batch.", SECONDS_BUCKETS
        )
        self._dispatch_overhead_family = histogram(
            "batchmark_dispatch_overhead_seconds",
            "The harness's own time per measured batch (per report in continuous dispatch), outside the engine's "
            "calls: the engine waits for all of it.",
            OVERHEAD_BUCKETS,
        )
        self._engine_busy_family = counter(
            "batchmark_engine_busy_seconds",
            "Seconds inside the engine's own calls (generate() or step()) for measured batches; its rate is the "
            "engine utilisation.",
        )
        self._engine_steps_family = counter(
            "batchmark_engine_steps", "Engine steps (scheduler iterations) of measured batches."
        )
        self._batch_size_family = histogram(
            "batchmark_effective_batch_size",
            "Requests per measured micro-batch, as dispatched.",
            batch_size_buckets(max(sizes)),
        )
        self._in_flight_family = gauge("batchmark_requests_in_flight", "Requests issued and not finished.")
        self._queued_family = gauge(
            "batchmark_requests_queued", "Requests waiting in the engine worker for a micro-batch."
        )
        self._load_seconds_family = gauge(
            "batchmark_engine_load_seconds", "Time to load the engine, outside every timed phase."
        )
        self._phase_family = gauge(
            "batchmark_phase",
            "1 for the phase the run is in (loading, warmup, measuring, cooldown, done), 0 for the others.",
            ["phase"],
        )
        run_info = Info(
            "batchmark",
            "The run: model, backend, engine, batch size and batchmark's version.",
            list(self._run_labels),
            registry=registry,
        )
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
        self._bind(config.backend.batch_size)
        self.on_phase("loading")

    def _bind(self, batch_size: int) -> None:
        """Point every series at this batch size (a sweep's point); the previous point's series keep their values."""
        labels = {**self._run_labels, "batch_size": str(batch_size)}
        self._requests = {outcome: self._requests_family.labels(**labels, outcome=outcome) for outcome in OUTCOMES}
        self._prompt_tokens = self._prompt_tokens_family.labels(**labels)
        self._output_tokens = self._output_tokens_family.labels(**labels)
        self._latency = self._latency_family.labels(**labels)
        self._queue_wait = self._queue_wait_family.labels(**labels)
        self._batch_wait = self._batch_wait_family.labels(**labels)
        self._batch_duration = self._batch_duration_family.labels(**labels)
        self._batch_size = self._batch_size_family.labels(**labels)
        self._dispatch_overhead = self._dispatch_overhead_family.labels(**labels)
        self._engine_busy = self._engine_busy_family.labels(**labels)
        self._engine_steps = self._engine_steps_family.labels(**labels)
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

    def on_batch(self, event: BatchEvent) -> None:
        report = event.report
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
            self._latency.observe(report.finished_at - enqueued_at)
            self._queue_wait.observe(dispatched_at - enqueued_at)
            self._batch_wait.observe(report.batch_wait(enqueued_at))
        # Counters move once per batch, by the batch's sums: a scrape never sees half a batch counted, and the
        # dispatcher pays one locked increment per series and batch rather than per request.
        if succeeded:
            self._requests["success"].inc(succeeded)
            self._prompt_tokens.inc(prompt_tokens)
            self._output_tokens.inc(output_tokens)
        if failed:
            self._requests["error"].inc(failed)
        if succeeded or failed:
            self._engine_busy.inc(report.engine_busy)
            self._engine_steps.inc(report.steps)
        if (succeeded or failed) and report.effective_batch_size > 0:
            self._dispatch_overhead.observe(report.overhead_seconds)
            self._batch_duration.observe(report.finished_at - report.started_at)
            self._batch_size.observe(report.effective_batch_size)
        self._queued.set(report.queue_depth)

    def on_progress(self, progress: Progress) -> None:
        self._in_flight.set(progress.in_flight)
        self._queued.set(progress.queued)

    def on_benchmark_end(self, result: BenchmarkResult) -> None:
        self._requests["incomplete"].inc(result.requests.incomplete)
        self._in_flight.set(0)


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
