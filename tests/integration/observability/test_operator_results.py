"""The operator's result gauges of a sweep with repeats, scraped by a real Prometheus: each point and repeat is a
series of its own, and the batch-size comparison dashboard shows each point as the mean of its repeats."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import start_http_server

from batchmark.operator.controller.metrics import OperatorMetrics
from dashboards.build import CHART_DASHBOARDS
from dashboards.promql import queries, substitute
from devtools.cluster.controlplane import free_port
from tests.integration.observability.servers import prometheus

pytestmark = pytest.mark.integration

NAMESPACE = "bench"
SPEC = {"backend": {"model": "m", "batchSize": 8, "engine": "simulated"}}
# Output tokens/s of each repeat of each point of the sweep.
RATES = {8: [100.0, 110.0, 120.0], 16: [200.0, 190.0, 210.0]}
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__range": "10m", "datasource": "prometheus"}


def entry(rate: float, **extra: Any) -> dict[str, Any]:
    """A status.results entry with every figure the dashboard reads."""
    return {
        "strategy": "throughputx64",
        "outputTokensPerSecond": rate,
        "totalTokensPerSecond": rate * 3,
        "requestsPerSecond": rate / 10,
        "latencyP50Seconds": 1000 / rate,
        "latencyP99Seconds": 2000 / rate,
        "ttftP99Seconds": 0.1,
        "engineUtilization": 0.99,
        **extra,
    }


def by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    """Each series' value by its labels (Prometheus keeps no empty label: those read "")."""
    return {tuple(series["metric"].get(label, "") for label in labels): float(series["value"][1]) for series in result}


def test_the_comparison_dashboard_shows_each_point_as_the_mean_of_its_repeats(tmp_path: Path) -> None:
    metrics = OperatorMetrics()
    sweep = [
        entry(rates[repeat], swept={"batch_size": size}, batchSize=size, repeat=repeat)
        for repeat in range(3)
        for size, rates in RATES.items()
    ]
    metrics.set_results(NAMESPACE, "sweep", SPEC, sweep)
    metrics.set_results(NAMESPACE, "single", SPEC, [entry(50.0)])
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=metrics.registry)
    try:
        # honor_labels: the operator's namespace label is the benchmark's, as the chart's ServiceMonitor keeps it.
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], honor_labels=True) as prom:
            deadline = time.monotonic() + 30
            while len(prom.query("batchmark_result_output_tokens_per_second")) < 7:
                assert time.monotonic() < deadline, "Prometheus did not scrape the operator's result gauges"
                time.sleep(0.5)
            scraped = by(prom.query("batchmark_result_output_tokens_per_second"), "name", "batch_size", "repeat")
            assert scraped == {
                **{
                    ("sweep", str(size), str(repeat)): rates[repeat]
                    for size, rates in RATES.items()
                    for repeat in range(3)
                },
                ("single", "8", ""): 50.0,
            }

            board = json.loads((CHART_DASHBOARDS / "batch-size-comparison.json").read_text())
            values = {**GRAFANA_VARIABLES, "namespace": NAMESPACE, "model": "m"}
            found = {where: substitute(expr, values) for where, expr in queries(board)}
            for where, promql in found.items():
                assert prom.query(promql), f"{where} returned nothing: {promql}"
            table = "panel 'Finished benchmarks'"
            means = {("sweep", str(size)): sum(rates) / 3 for size, rates in RATES.items()} | {("single", "8"): 50.0}
            output = by(prom.query(found[f"{table} A"]), "name", "batch_size")
            assert output == pytest.approx(means)
            assert by(prom.query(found[f"{table} H"]), "name", "batch_size") == {
                ("sweep", "8"): 3,
                ("sweep", "16"): 3,
                ("single", "8"): 1,
            }
            bars = by(prom.query(found["panel 'Output tokens/s by batch size' A"]), "model", "batch_size")
            assert bars == pytest.approx({("m", "8"): 110.0, ("m", "16"): 200.0})
    finally:
        server.shutdown()
        thread.join(timeout=5)
