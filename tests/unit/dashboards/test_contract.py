"""Every PromQL expression the chart ships, the dashboards' and the alert rules', names only series of the metrics
contract (batchmark.runner.series), with labels those series carry in Prometheus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.build import CHART_DASHBOARDS, DASHBOARDS
from dashboards.promql import contract_problems, queries, rule_queries, variable_labels

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "charts" / "batchmark" / "templates" / "_alerts.tpl"
# promtool's unit tests of the alerts: their input series must be series the operator exports, as scraped.
ALERT_TESTS = ROOT / "tests" / "integration" / "chart" / "alerts.test.yaml"


def committed(file_name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((CHART_DASHBOARDS / file_name).read_text())
    return board


@pytest.mark.parametrize("file_name", sorted(DASHBOARDS))
def test_every_dashboard_query_reads_declared_series_and_labels(file_name: str) -> None:
    board = committed(file_name)
    found = list(queries(board))
    assert found
    for where, expr in found:
        assert not contract_problems(expr), f"{file_name}: {where}: {contract_problems(expr)} in {expr}"
    for where, expr, label in variable_labels(board):
        # label_values(expr, label) lists what `group by (label) (expr)` would.
        grouped = f"group by ({label}) ({expr})"
        assert not contract_problems(grouped), f"{file_name}: {where}: {contract_problems(grouped)}"


def test_every_alert_rule_reads_declared_series_and_labels() -> None:
    rules = list(rule_queries(ALERTS.read_text()))
    assert [alert for alert, _ in rules] == [
        "BatchBenchmarkFailed",
        "BatchBenchmarkStuckScheduling",
        "BatchBenchmarkRegressed",
        "BatchmarkOperatorDown",
        "BatchmarkOperatorErroring",
    ]
    for alert, expr in rules:
        assert not contract_problems(expr), f"{alert}: {contract_problems(expr)} in {expr}"


def test_the_alert_tests_feed_the_rules_declared_series() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    inputs = [each["series"] for test in tests for each in test["input_series"]]
    assert inputs
    for selector in inputs:
        assert not contract_problems(selector), f"{ALERT_TESTS.name}: {contract_problems(selector)}"


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("batchmark_request_total", "batchmark_request_total is not a declared series"),
        ('batchmark_phase{phase="done", stage="x"}', "batchmark_phase has no label ['stage']"),
        ("sum by (outcome) (batchmark_output_tokens_total)", "sum by ['outcome']: not a label of"),
        ("sum by (le) (rate(batchmark_queue_wait_seconds_sum[5m]))", "sum by ['le']"),
        ("max by (model) (batchmark_result_request_latency_p99_seconds{benchmark=~'.*'})", "has no label"),
        ("batchmark_phase == on (reason) batchmark_requests_in_flight", "on/ignoring ['reason']"),
        ("sum without (namespace) (batchmark_operator_benchmarks) > on (namespace) up", "on/ignoring ['namespace']"),
        ('{__name__="batchmark_phase"}', "a selector without a series name"),
    ],
)
def test_a_wrong_series_or_label_is_found(expr: str, problem: str) -> None:
    assert any(problem in found for found in contract_problems(expr)), contract_problems(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "histogram_quantile(0.9, sum by (le, job)"
        ' (rate(batchmark_operator_reconcile_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))',
        'max by (model, batch_size) (batchmark_info{namespace=~"$namespace", run_id=~"$run"})',
        'absent(up{job="{{ $job }}"} == 1)',
        "batchmark_result_output_tokens_per_second{namespace='a', repeat=''}",
        "batchmark_result_output_tokens_per_second{job='batchmark', benchmark='b', swept=''}",
        'label_replace(batchmark_phase, "point", "$1", "batch_size", "(.*)") * on (point) group_left (phase)'
        ' label_replace(batchmark_requests_queued, "point", "$1", "batch_size", "(.*)")',
    ],
)
def test_what_prometheus_carries_is_no_problem(expr: str) -> None:
    assert contract_problems(expr) == []
