"""The dashboards: the committed JSON is what the code builds, and it round-trips through the SDK's models
(tests/unit/dashboards/test_contract.py checks their queries against the metrics contract)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards.build import CHART_DASHBOARDS, DASHBOARDS, render_all
from dashboards.promql import queries, series_names, substitute


def committed(file_name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((CHART_DASHBOARDS / file_name).read_text())
    return board


def test_the_committed_dashboards_are_fresh() -> None:
    for file_name, text in render_all().items():
        path = CHART_DASHBOARDS / file_name
        assert path.exists(), f"{path} is missing: run `.venv/bin/python -m dashboards`"
        assert path.read_text() == text, f"{path} is stale: run `.venv/bin/python -m dashboards`"
    assert sorted(p.name for p in CHART_DASHBOARDS.glob("*.json")) == sorted(DASHBOARDS)


def assert_contains(decoded: Any, original: Any, where: str) -> None:
    if isinstance(original, dict):
        assert isinstance(decoded, dict), where
        for key, value in original.items():
            assert key in decoded, f"{where}.{key} was lost"
            assert_contains(decoded[key], value, f"{where}.{key}")
    elif isinstance(original, list):
        assert isinstance(decoded, list), where
        assert len(decoded) == len(original), where
        for index, (left, right) in enumerate(zip(decoded, original, strict=True)):
            assert_contains(left, right, f"{where}[{index}]")
    else:
        assert decoded == original, where


@pytest.mark.parametrize("file_name", sorted(DASHBOARDS))
def test_the_json_round_trips_through_the_sdk_models(file_name: str) -> None:
    register_default_plugins()
    original = committed(file_name)
    again = json.loads(JSONEncoder(sort_keys=True).encode(Dashboard.from_json(original)))
    # Decoding fills in the typed models' defaults (a time series' line width, ...): everything the file says
    # survives, and a second pass changes nothing.
    assert_contains(again, original, file_name)
    assert json.loads(JSONEncoder(sort_keys=True).encode(Dashboard.from_json(again))) == again
    panel_types = {panel["type"] for panel in original["panels"]}
    assert panel_types <= {"row", "timeseries", "stat", "state-timeline", "table", "barchart"}


def test_series_names_reads_names_not_functions_or_labels() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x=~"$y", z="q{w}"}[5m])))'
        " / on (job) group_left (pod) b_total offset 1m and c"
    )
    assert series_names(expr) == {"a_bucket", "b_total", "c"}


def test_substitute_replaces_every_variable() -> None:
    assert substitute('x{a=~"$run", b="${runs}"}', {"run": "1", "runs": "2"}) == 'x{a=~"1", b="2"}'
    with pytest.raises(AssertionError, match="unsubstituted"):
        substitute("x[$__range]", {})


def test_the_run_dashboards_quantiles_are_per_benchmark_and_run() -> None:
    quantile_queries = [
        (where, expr) for where, expr in queries(committed("benchmark-run.json")) if "histogram_quantile" in expr
    ]
    assert len(quantile_queries) >= 10
    for where, expr in quantile_queries:
        assert "sum by (le, benchmark, run_id, batch_size)" in expr, f"{where} blends runs: {expr}"
