"""Runs measured apart merged into one: sums over the window they all measured, distributions merged from their
sketches, each run's engines listed as replicas."""

from collections.abc import Sequence

import numpy as np
import pytest

from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import NO_TIMINGS, Completion
from batchmark.runner.results.merge import MergeError, merge_reports
from batchmark.runner.results.report import RunReport
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy
from tests.unit.observability_data import report


def run(started_wall: float, seconds: int, tokens_per_batch: int, latencies: Sequence[float], run_id: str) -> RunReport:
    """A run of ``seconds``, one batch of 4 requests finishing every 0.25 s, each of ``tokens_per_batch / 4`` output
    tokens, their latencies taken in turn from ``latencies``."""
    aggregator = Aggregator(0.0, started_wall, 0, Window(), 0)
    for step in range(seconds * 4):
        finished = (step + 1) * 0.25
        completions = [Completion(step * 4 + i, 10, tokens_per_batch // 4, None, NO_TIMINGS) for i in range(4)]
        enqueued: list[float | None] = [finished - latencies[(step * 4 + i) % len(latencies)] for i in range(4)]
        batch = BatchReport(step, True, finished - 0.25, finished - 0.25, finished, completions, 0)
        aggregator.on_batch(BatchEvent(batch, enqueued, [True] * 4))
    result = aggregator.finish(
        end=float(seconds), stop_reason="max_duration", incomplete=0, interrupted=False, strategy=Strategy("throughput")
    )
    return report([result], run_id=run_id)


def test_the_sum_is_over_the_window_both_measured_and_distributions_merge_from_sketches() -> None:
    rng = np.random.default_rng(0)
    fast, slow = list(rng.lognormal(-2, 0.3, 400)), list(rng.lognormal(-1, 0.3, 400))
    # The second run began 2 s after the first; each ran 10 s: they both measured for 8 s.
    first = run(1000.0, 10, 400, fast, "one")
    second = run(1002.0, 10, 200, slow, "two")
    merged = merge_reports([("a", first), ("b", second)])
    [benchmark] = merged.benchmarks
    assert benchmark.measured_duration == pytest.approx(8.0)
    assert benchmark.measured_from == pytest.approx(2.0)
    assert benchmark.throughput.output_tokens_per_second == pytest.approx(400 * 4 + 200 * 4, rel=0.02)
    assert benchmark.throughput.requests_per_second == pytest.approx(32.0, rel=0.02)
    assert benchmark.tokens["prompt"] == pytest.approx(10 * 32 * 8, rel=0.02)
    assert benchmark.replicas is not None
    assert [replica.devices for replica in benchmark.replicas] == ["a: simulated GPU", "b: simulated GPU"]
    assert [replica.throughput.output_tokens_per_second for replica in benchmark.replicas] == [1600.0, 800.0]
    summary = benchmark.replica_summary
    assert summary is not None
    assert (summary.count, summary.straggler_ratio) == (2, 2.0)
    assert summary.start_skew_seconds == pytest.approx(2.0)
    latency = benchmark.distributions.request_latency
    every = np.array([fast[i % 400] for i in range(160)] + [slow[i % 400] for i in range(160)])
    assert latency.count == 320
    assert latency.mean == pytest.approx(every.mean())
    assert latency.std == pytest.approx(every.std())
    assert latency.min == pytest.approx(every.min())
    assert latency.max == pytest.approx(every.max())
    assert latency.p99 == pytest.approx(np.quantile(every, 0.99), rel=0.03)
    assert latency.median == pytest.approx(np.quantile(every, 0.5), rel=0.03)
    assert not latency.exact
    assert merged.engine.replicas == 2
    assert merged.complete


def test_runs_whose_windows_share_no_moment_are_refused() -> None:
    with pytest.raises(MergeError, match="share no moment"):
        merge_reports([("a", run(1000.0, 5, 40, [0.1], "one")), ("b", run(1006.0, 5, 40, [0.1], "two"))])


def test_runs_of_different_benchmarks_or_one_run_twice_are_refused() -> None:
    first = run(1000.0, 5, 40, [0.1], "one")
    other = run(1000.0, 5, 40, [0.1], "two")
    with pytest.raises(MergeError, match="b: its model"):
        merge_reports(
            [("a", first), ("b", other.model_copy(update={"engine": other.engine.model_copy(update={"model": "x"})}))]
        )
    with pytest.raises(MergeError, match="b is the same run as a"):
        merge_reports([("a", first), ("b", first)])
    with pytest.raises(MergeError, match="at least two"):
        merge_reports([("a", first)])
