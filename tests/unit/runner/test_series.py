"""The metrics contract is what the three sides export: each family they register is declared for that side,
with its type, help text and labels."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.runner import series
from batchmark.runner.observe.metrics import EngineNodeMetrics, MetricsObserver
from batchmark.runner.observe.pushgateway import results_registry
from tests.unit.observability_data import CONFIG, simple_report


def assert_declared(registry: CollectorRegistry, exporter: series.Exporter) -> set[str]:
    """The names of the registry's families, each checked against its declaration."""
    declared = {each.name: each for each in series.SERIES if each.exporter == exporter}
    names = set()
    for family in registry.collect():
        assert family.name in declared, f"{family.name} is exported by the {exporter} but not declared"
        declaration = declared[family.name]
        assert (family.type, family.documentation) == (declaration.kind, declaration.help), family.name
        for sample in family.samples:
            assert sample.name in declaration.samples, sample.name
            allowed = {*declaration.labels, *declaration.info_keys} | (
                {"le"} if sample.name.endswith("_bucket") else set()
            )
            assert set(sample.labels) == allowed, sample
        names.add(family.name)
    return names


def test_the_runners_live_series_are_the_declared_ones() -> None:
    observer = MetricsObserver(CONFIG, "declared")
    exported = assert_declared(observer.registry, "runner")
    assert exported == {each.name for each in series.RUNNER_SERIES}


def test_a_workers_only_pods_series_are_the_declared_ones() -> None:
    metrics = EngineNodeMetrics("nodes", 1)
    metrics.holds_node(True)
    exported = assert_declared(metrics.registry, "runner")
    assert exported == {each.name for each in series.ENGINE_NODE_SERIES}


def test_the_operators_series_are_the_declared_ones() -> None:
    metrics = OperatorMetrics()
    for gauge in metrics.results.values():
        gauge.labels(*series.OPERATOR_RESULT_LABELS).set(1)
    metrics.set_phase("team-a", "sweep", "Running")
    metrics.set_failure("team-a", "sweep", "EngineError", "2026-01-01T00:00:00Z")
    exported = assert_declared(metrics.registry, "operator")
    assert exported == {each.name for each in series.OPERATOR_SERIES}


def test_a_push_carries_declared_series_only() -> None:
    failed = assert_declared(results_registry("unit", None, now=1.0), "pushgateway")
    assert failed == {series.LAST_FAILURE.name}
    succeeded = assert_declared(results_registry("unit", simple_report(), now=1.0), "pushgateway")
    assert series.LAST_SUCCESS.name in succeeded
    assert {series.LAST_FAILURE.name, series.RESULT_REPEATS.name, series.RESULT_SLO_MET.name}.isdisjoint(succeeded)


def test_each_series_is_declared_once_per_side_and_shared_ones_agree() -> None:
    keys = [(each.name, each.exporter) for each in series.SERIES]
    assert len(keys) == len(set(keys))
    for each in series.SERIES:
        for other in series.selected_by(each.samples[0]):
            assert (other.kind, other.help) == (each.kind, each.help), each.name


def test_a_declaration_builds_only_its_own_kind() -> None:
    registry = CollectorRegistry()
    with pytest.raises(TypeError, match="is a counter"):
        series.gauge(series.REQUESTS, registry)
    with pytest.raises(ValueError, match="needs its buckets"):
        series.histogram(series.EFFECTIVE_BATCH_SIZE, registry)


def test_samples_and_their_labels_in_prometheus() -> None:
    assert series.REQUESTS.samples == ("batchmark_requests_total", "batchmark_requests_created")
    assert series.RUN_INFO.samples == ("batchmark_info",)
    latency = series.REQUEST_LATENCY
    assert "le" in latency.labels_of("batchmark_request_latency_seconds_bucket")
    assert "le" not in latency.labels_of("batchmark_request_latency_seconds_count")
    assert {"job", "benchmark", "strategy"} <= series.RESULT_REQUESTS.labels_of("batchmark_result_requests")
    assert "benchmark" not in series.OPERATOR_LATENCY_P99.labels_of(series.OPERATOR_LATENCY_P99.name)
