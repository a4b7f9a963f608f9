"""The live series: what a run's events make of them, and the /metrics server's life cycle."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner import __version__
from batchmark.runner.config.sweep import SweepConfig
from batchmark.runner.engines.base import EngineInfo, TokenTimes
from batchmark.runner.observe.metrics import MetricsObserver, MetricsServer, batch_size_buckets
from batchmark.runner.run.events import BatchEvent, Progress
from batchmark.runner.series import RUNNER_SERIES, SECONDS_BUCKETS
from tests.unit.observability_data import CONFIG, batch, benchmark

LABELS = {"benchmark": "unit", "run_id": "r1", "batch_size": "4"}


def samples(observer: MetricsObserver) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(observer.registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(observer: MetricsObserver, name: str, **labels: str) -> float:
    """One sample's value; a series of one engine's work is replica 0's unless ``replica`` is given."""
    declared = next(series for series in RUNNER_SERIES if name in series.samples)
    if "replica" in declared.labels:
        labels.setdefault("replica", "0")
    return samples(observer)[(name, frozenset({**LABELS, **labels}.items()))]


def test_counts_follow_the_report_measured_requests_only() -> None:
    observer = MetricsObserver(CONFIG, "r1")
    first = batch(0, 0, 4, 0.2)
    observer.on_batch(first)
    # A warm-up request (not measured) and a late one from an earlier benchmark (no enqueue time) are left out,
    # as the aggregator leaves them out of the report.
    mixed = batch(1, 4, 4, 0.9, errors=1)
    observer.on_batch(BatchEvent(mixed.report, [None, 0.5, 0.5, 0.5], [False, False, True, True]))
    assert value(observer, "batchmark_requests_total", outcome="success") == 4 + 1
    assert value(observer, "batchmark_requests_total", outcome="error") == 1
    assert value(observer, "batchmark_output_tokens_total") == 8 * 5
    assert value(observer, "batchmark_prompt_tokens_total") == 16 * 5
    assert value(observer, "batchmark_request_latency_seconds_count") == 5
    assert value(observer, "batchmark_request_latency_seconds_sum") == pytest.approx(4 * 0.6 + (1.4 - 0.5))
    assert value(observer, "batchmark_effective_batch_size_count") == 2
    assert value(observer, "batchmark_effective_batch_size_sum") == 8


def test_the_same_events_give_the_reports_figures() -> None:
    events = [batch(0, 0, 4, 0.2), batch(1, 4, 4, 0.9, errors=2), batch(2, 8, 2, 1.6)]
    observer = MetricsObserver(CONFIG, "r1")
    for event in events:
        observer.on_batch(event)
    result = benchmark(events)
    observer.on_benchmark_end(result)
    assert value(observer, "batchmark_output_tokens_total") == result.tokens["output"]
    assert value(observer, "batchmark_requests_total", outcome="success") == result.requests.completed
    assert value(observer, "batchmark_requests_total", outcome="error") == result.requests.errored
    assert value(observer, "batchmark_batch_duration_seconds_count") == result.batches


def test_gauges_phase_and_info() -> None:
    observer = MetricsObserver(CONFIG, "r1")
    assert value(observer, "batchmark_phase", phase="loading") == 1
    observer.on_engine_loaded(EngineInfo(kind="simulated", model="tiny/model"), 1.25)
    observer.on_phase("measuring")
    observer.on_progress(Progress(1.0, 10, 4, 0, 6, 3, 32, 12, None))
    assert value(observer, "batchmark_engine_load_seconds") == 1.25
    assert value(observer, "batchmark_requests_in_flight") == 6
    assert value(observer, "batchmark_requests_queued") == 3
    phases = {phase: value(observer, "batchmark_phase", phase=phase) for phase in ("loading", "measuring", "done")}
    assert phases == {"loading": 0, "measuring": 1, "done": 0}
    info = value(
        observer,
        "batchmark_info",
        model="tiny/model",
        backend="vllm_python_batch",
        engine="simulated",
        batch_size="4",
        version=__version__,
    )
    assert info == 1


def test_every_series_carries_benchmark_and_run_id_and_follows_the_naming_rules() -> None:
    observer = MetricsObserver(CONFIG, "r1")
    observer.on_batch(batch(0, 0, 4, 0.2))
    for family in text_string_to_metric_families(generate_latest(observer.registry).decode()):
        assert family.name.startswith("batchmark_")
        if family.type == "counter":
            assert any(sample.name.endswith("_total") for sample in family.samples)
        for sample in family.samples:
            assert sample.labels["benchmark"] == "unit"
            assert sample.labels["run_id"] == "r1"


def test_buckets() -> None:
    assert SECONDS_BUCKETS[0] == 0.001
    assert SECONDS_BUCKETS[-1] == 3600
    assert list(SECONDS_BUCKETS) == sorted(SECONDS_BUCKETS)
    assert batch_size_buckets(1) == (1.0,)
    assert batch_size_buckets(32) == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    assert batch_size_buckets(24) == (1.0, 2.0, 4.0, 8.0, 16.0, 24.0)


def test_server_binds_loopback_and_releases_its_port() -> None:
    observer = MetricsObserver(CONFIG, "r1")
    server = MetricsServer(observer.registry, 0)
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert b"batchmark_phase" in response.read()
    finally:
        server.close()
    with socket.socket() as probe:  # closed means closed: the port can be bound again at once
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", server.port))


def test_dispatch_overhead_engine_busy_and_steps_follow_the_report() -> None:
    events = []
    for index, at in enumerate((0.2, 0.9, 1.6)):
        event = batch(index, index * 4, 4, at)
        report = event.report._replace(engine_seconds=0.4, overhead_seconds=0.0002 * (index + 1), steps=8)
        events.append(BatchEvent(report, event.enqueued, event.measured))
    observer = MetricsObserver(CONFIG, "r1")
    for event in events:
        observer.on_batch(event)
    result = benchmark(events)
    overhead = result.distributions.dispatch_overhead
    assert value(observer, "batchmark_dispatch_overhead_seconds_count") == overhead.count == 3
    assert value(observer, "batchmark_dispatch_overhead_seconds_sum") == pytest.approx(0.0002 * (1 + 2 + 3))
    assert value(observer, "batchmark_dispatch_overhead_seconds_bucket", le="0.00025") == 1
    assert value(observer, "batchmark_engine_busy_seconds_total") == pytest.approx(1.2)
    assert value(observer, "batchmark_engine_steps_total") == result.engine_steps == 24


def test_a_sweep_moves_the_series_to_each_points_batch_size() -> None:
    swept = CONFIG.model_copy(update={"sweep": SweepConfig(batch_size=[2, 16])})
    observer = MetricsObserver(swept, "r1")
    observer.on_sweep_point({"batch_size": 2}, 0, 2)
    observer.on_phase("measuring")
    observer.on_batch(batch(0, 0, 2, 0.1))
    observer.on_sweep_point({"batch_size": 16}, 1, 2)
    observer.on_batch(batch(1, 2, 4, 0.3))
    observer.on_phase("done")
    assert value(observer, "batchmark_requests_total", batch_size="2", outcome="success") == 2
    assert value(observer, "batchmark_requests_total", batch_size="16", outcome="success") == 4
    assert value(observer, "batchmark_phase", batch_size="16", phase="done") == 1
    assert value(observer, "batchmark_phase", batch_size="2", phase="measuring") == 0
    # Buckets up to the largest size swept.
    assert value(observer, "batchmark_effective_batch_size_bucket", batch_size="16", le="16.0") == 1


def test_each_engine_replicas_work_carries_its_replica_and_every_replica_is_there_from_the_start() -> None:
    config = CONFIG.model_copy(update={"backend": CONFIG.backend.model_copy(update={"replicas": 2})})
    observer = MetricsObserver(config, "r1")
    assert value(observer, "batchmark_output_tokens_total", replica="1") == 0
    event = batch(0, 0, 4, 0.2)
    observer.on_batch(BatchEvent(event.report._replace(replica=1), event.enqueued, event.measured))
    assert value(observer, "batchmark_output_tokens_total", replica="0") == 0
    assert value(observer, "batchmark_output_tokens_total", replica="1") == 8 * 4
    assert value(observer, "batchmark_request_latency_seconds_count", replica="1") == 4
    # Run-wide gauges have no replica.
    observer.on_progress(Progress(1.0, 8, 4, 0, 4, 0, 32, None, None))
    assert value(observer, "batchmark_requests_in_flight") == 4


def test_a_streamed_request_s_first_token_and_every_interval_are_observed() -> None:
    """The async backend's completions carry their tokens' times: TTFT once per request, ITL once per token
    after the first, as the report's distributions count them."""
    event = batch(0, 0, 2, 1.0)
    streamed = [
        completion._replace(stream=TokenTimes(1.2 + index, 1.5 + index, [0.1] * 7))
        for index, completion in enumerate(event.report.completions)
    ]
    event = BatchEvent(event.report._replace(completions=streamed), event.enqueued, event.measured)
    observer = MetricsObserver(CONFIG, "r1")
    observer.on_batch(event)
    assert value(observer, "batchmark_time_to_first_token_seconds_count") == 2
    assert value(observer, "batchmark_time_to_first_token_seconds_sum") == pytest.approx((1.2 - 0.9) + (2.2 - 0.9))
    assert value(observer, "batchmark_inter_token_latency_seconds_count") == 14
    assert value(observer, "batchmark_inter_token_latency_seconds_sum") == pytest.approx(1.4)
    result = benchmark([event])
    assert result.distributions.inter_token_latency.count == 14
    assert result.distributions.time_to_first_token.count == 2
