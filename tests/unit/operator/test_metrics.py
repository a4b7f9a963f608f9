"""The operator's per-benchmark series, which the chart's alerts route on: one phase series per benchmark,
its failure's time (the same after a restart), all gone with the benchmark."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchmark.operator.metrics import OperatorMetrics


def series(metrics: OperatorMetrics, name: str) -> dict[frozenset[tuple[str, str]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def test_each_benchmark_has_one_phase_series_that_follows_it() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("team-a", "sweep", "Scheduling")
    metrics.set_phase("team-b", "sweep", "Scheduling")
    metrics.set_phase("team-a", "sweep", "Running")
    assert series(metrics, "batchmark_operator_benchmark_phase") == {
        labels(namespace="team-a", name="sweep", phase="Running"): 1,
        labels(namespace="team-b", name="sweep", phase="Scheduling"): 1,
    }
    counts = series(metrics, "batchmark_operator_benchmarks")
    assert counts[labels(phase="Running")] == 1
    assert counts[labels(phase="Scheduling")] == 1
    metrics.forget("team-b", "sweep")
    assert series(metrics, "batchmark_operator_benchmark_phase") == {
        labels(namespace="team-a", name="sweep", phase="Running"): 1
    }


def test_a_failure_is_stamped_with_its_completion_time_until_the_benchmark_goes() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("team-a", "broken", "Failed")
    metrics.set_failure("team-a", "broken", "EngineError", "2026-01-02T03:04:05Z")
    # Seen again (another reconcile, or a restarted operator): the same series and time, so no new alert.
    metrics.set_failure("team-a", "broken", "EngineError", "2026-01-02T03:04:05Z")
    failed = labels(namespace="team-a", name="broken", reason="EngineError")
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {failed: 1767323045.0}
    metrics.set_failure("team-a", "broken", "no time", "yesterday")  # a status nobody should have written
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {failed: 1767323045.0}
    metrics.forget("team-a", "broken")
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {}
    assert series(metrics, "batchmark_operator_benchmark_phase") == {}
