"""A benchmark of several engine replicas: each replica's own figures, their sum, spread and scaling."""

import pytest

from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import NO_TIMINGS, Completion
from batchmark.runner.results.report import BenchmarkResult
from batchmark.runner.results.scaling import with_scaling_efficiency
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy


def replica_batch(replica: int, first: int, size: int, started: float, seconds: float, tokens: int) -> BatchEvent:
    completions = [Completion(first + i, 16, tokens, None, NO_TIMINGS) for i in range(size)]
    report = BatchReport(first, True, started, started, started + seconds, completions, 0, replica=replica)
    return BatchEvent(report=report, enqueued=[started] * size, measured=[True] * size)


def finish(aggregator: Aggregator, end: float, incomplete: list[int] | None = None) -> BenchmarkResult:
    return aggregator.finish(
        end=end,
        stop_reason="max_requests",
        incomplete=sum(incomplete or []),
        interrupted=False,
        strategy=Strategy("throughput"),
        incomplete_by_replica=incomplete,
    )


def test_each_replica_is_measured_over_the_one_window_and_the_aggregate_is_their_sum() -> None:
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0, replica_devices=["GPUs 0", "GPUs 1"])
    # Replica 0 busy the whole 10 s with batches of 8 requests of 10 tokens; replica 1 half of it, 4 requests each.
    for second in range(10):
        aggregator.on_batch(replica_batch(0, second * 100, 8, float(second), 1.0, 10))
        aggregator.on_batch(replica_batch(1, second * 100 + 50, 4, float(second), 0.5, 10))
    result = finish(aggregator, 10.0, incomplete=[0, 3])
    fast, slow = result.replicas or []
    assert (fast.replica, fast.devices, slow.devices) == (0, "GPUs 0", "GPUs 1")
    assert fast.throughput.output_tokens_per_second == pytest.approx(80.0)
    assert slow.throughput.output_tokens_per_second == pytest.approx(40.0)
    assert fast.engine_utilization == pytest.approx(1.0)
    assert slow.engine_utilization == pytest.approx(0.5)
    assert (fast.mean_batch_size, slow.mean_batch_size, slow.batches) == (8.0, 4.0, 10)
    assert (slow.requests.completed, slow.requests.incomplete) == (40, 3)
    assert slow.request_latency.median == pytest.approx(0.5)
    assert result.throughput.output_tokens_per_second == pytest.approx(120.0)
    # Two engines' time in the window: the aggregate's utilisation is their mean, never above 1.
    assert result.engine_utilization == pytest.approx(0.75)
    summary = result.replica_summary
    assert summary is not None
    assert summary.count == 2
    assert summary.straggler_ratio == pytest.approx(2.0)
    assert (summary.output_tokens_per_second.min, summary.output_tokens_per_second.max) == (40.0, 80.0)
    assert summary.scaling_efficiency is None


def test_a_replica_that_produced_nothing_has_no_straggler_ratio() -> None:
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0, replica_devices=["CPUs 0", "CPUs 1"])
    aggregator.on_batch(replica_batch(0, 0, 4, 0.0, 1.0, 10))
    result = finish(aggregator, 1.0)
    assert result.replica_summary is not None
    assert result.replica_summary.straggler_ratio is None
    assert result.replicas is not None
    assert result.replicas[1].mean_batch_size is None


def test_one_replica_reports_no_replicas() -> None:
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0)
    aggregator.on_batch(replica_batch(0, 0, 4, 0.0, 1.0, 10))
    result = finish(aggregator, 1.0)
    assert result.replicas is None
    assert result.replica_summary is None


def measured(replicas: int, rate: float, strategy: str = "throughput", repeat: int = 0) -> BenchmarkResult:
    devices = [f"GPUs {index}" for index in range(replicas)] if replicas > 1 else None
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0, replica_devices=devices)
    for replica in range(replicas):
        aggregator.on_batch(replica_batch(replica, replica * 10, 1, 0.0, 1.0, int(rate / replicas)))
    return finish(aggregator, 1.0).model_copy(
        update={"strategy": strategy, "repeat": repeat, "swept": {"replicas": replicas, "batch_size": 8}}
    )


def test_scaling_efficiency_is_against_one_replica_at_the_same_strategy_repeat_and_other_values() -> None:
    results = [measured(1, 100), measured(2, 180), measured(4, 320), measured(4, 400, strategy="constant@1/s")]
    scaled = with_scaling_efficiency(results, [1, 2, 4, 4])
    assert scaled[0].replica_summary is None
    assert scaled[1].replica_summary is not None
    assert scaled[1].replica_summary.scaling_efficiency == pytest.approx(0.9)
    assert scaled[2].replica_summary is not None
    assert scaled[2].replica_summary.scaling_efficiency == pytest.approx(0.8)
    assert scaled[3].replica_summary is not None
    assert scaled[3].replica_summary.scaling_efficiency is None  # no single replica measured at that strategy
