"""What Grafana would show: every query of the dashboards, its variables substituted as Grafana does, run against
a real Prometheus that scraped a real (simulated-engine) benchmark, returns data."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dashboards.build import CHART_DASHBOARDS
from dashboards.promql import queries, substitute
from devtools.cluster.controlplane import free_port
from tests.cli import command
from tests.integration.observability.servers import prometheus, stop

pytestmark = pytest.mark.integration

NAMESPACE = "bench"
NAME = "dashboards"
# What Grafana puts in for its own variables: a rate window of four 1 s scrapes and more, the dashboard's range.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__range": "10m", "datasource": "prometheus"}


def board(file_name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART_DASHBOARDS / file_name).read_text())
    return loaded


def test_every_benchmark_run_query_returns_data_from_a_real_run(tmp_path: Path) -> None:
    port = free_port()
    results = tmp_path / "results.json"
    with prometheus(
        tmp_path / "prometheus", [f"127.0.0.1:{port}"], target_labels={"namespace": NAMESPACE, "pod": "bench-0"}
    ) as prom:
        run = subprocess.Popen(
            command(
                "run",
                "--quiet",
                "--name",
                NAME,
                # time_scale=1: the run lasts several scrapes, so rates and quantiles have samples to work on.
                "--backend",
                # Two replicas: the per-replica panel has a line for each.
                "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=1,"
                "replicas=2",
                "--data",
                "kind=synthetic_text,prompt_tokens=256,output_tokens=64",
                "--profile",
                "kind=throughput,max_concurrency=16",
                "--constraint",
                "kind=max_requests,count=320",  # two replicas: as many seconds of running as one with 160
                "--output",
                str(results),
                "--metrics-port",
                str(port),
                "--metrics-linger",
                "3",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = run.communicate(timeout=120)
        finally:
            stop(run)
        assert run.returncode == 0, stderr
        run_id = json.loads(results.read_text())["run_id"]
        # The last scrape of the run: gauges are live there, and rate windows reach back over the run.
        done = prom.samples(f'batchmark_phase{{benchmark="{NAME}",phase="done"}}')
        at = max(t for t, v in done if v == 1)
        values = {**GRAFANA_VARIABLES, "namespace": NAMESPACE, "benchmark": NAME, "run": run_id}
        checked = 0
        for where, expr in queries(board("benchmark-run.json")):
            promql = substitute(expr, values)
            found = prom.query(promql, at=at)
            assert found, f"{where} returned nothing: {promql}"
            if "by (benchmark, run_id, replica)" in expr:
                assert len(found) == 2, f"{where}: one series per replica expected: {found}"
            checked += 1
        assert checked >= 20
        # "All" is `.*` for every variable: the same queries find the run without a selection.
        everything = {**GRAFANA_VARIABLES, "namespace": ".*", "benchmark": ".*", "run": ".*"}
        for where, expr in queries(board("benchmark-run.json")):
            assert prom.query(substitute(expr, everything), at=at), f"{where} with All returned nothing"


def start_run(name: str, output_tokens: int, port: int, results: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command(
            "run",
            "--quiet",
            "--name",
            name,
            "--backend",
            "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=1",
            "--data",
            f"kind=synthetic_text,prompt_tokens=256,output_tokens={output_tokens}",
            "--profile",
            "kind=throughput,max_concurrency=16",
            "--constraint",
            "kind=max_duration,seconds=8",
            "--output",
            str(results),
            "--metrics-port",
            str(port),
            # Long enough that both runs' final series are live at once, whichever ends first.
            "--metrics-linger",
            "15",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_two_runs_latencies_stay_apart_on_the_run_dashboard(tmp_path: Path) -> None:
    """Two runs at once, one generating 16 tokens a request and one 256: selecting both ("All"), the latency
    panel shows each run's own quantiles, not one blend of their histograms."""
    runs = {"short": 16, "long": 256}
    ports = {name: free_port() for name in runs}
    with prometheus(
        tmp_path / "prometheus",
        [f"127.0.0.1:{port}" for port in ports.values()],
        target_labels={"namespace": NAMESPACE},
    ) as prom:
        processes = {
            name: start_run(name, tokens, ports[name], tmp_path / f"{name}.json") for name, tokens in runs.items()
        }
        try:
            for name, process in processes.items():
                _, stderr = process.communicate(timeout=120)
                assert process.returncode == 0, f"{name}: {stderr}"
        finally:
            for process in processes.values():
                stop(process)
        reports = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in runs}
        # A moment when both runs are done and still served: the earlier of their last scrapes.
        at = min(
            max(t for t, v in prom.samples(f'batchmark_phase{{benchmark="{name}",phase="done"}}') if v == 1)
            for name in runs
        )
        everything = {**GRAFANA_VARIABLES, "namespace": ".*", "benchmark": ".*", "run": ".*"}
        panel = next(p for p in board("benchmark-run.json")["panels"] if p.get("title") == "Request latency")
        median_query = next(t["expr"] for t in panel["targets"] if t["legendFormat"].endswith("p50"))
        found = prom.query(substitute(median_query, everything), at=at)
        medians = {series["metric"].get("run_id"): float(series["value"][1]) for series in found}
        assert medians.keys() == {report["run_id"] for report in reports.values()}, found
        by_name = {name: medians[report["run_id"]] for name, report in reports.items()}
        exact = {
            name: report["benchmarks"][0]["distributions"]["request_latency"]["median"]
            for name, report in reports.items()
        }
        assert exact["long"] > 2 * exact["short"], exact  # the two runs' latencies really differ
        # Each series is its own run's median, as far as the histogram's buckets resolve it (a blend of both
        # runs would put the short run's median far above its own).
        for name in runs:
            assert exact[name] / 2 <= by_name[name] <= exact[name] * 2, (name, by_name, exact)
        # The overview's phase and engine load are per run too.
        for title in ("Phase", "Engine load time"):
            panel = next(p for p in board("benchmark-run.json")["panels"] if p.get("title") == title)
            (target,) = panel["targets"]
            found = prom.query(substitute(target["expr"], everything), at=at)
            assert sorted(series["metric"].get("run_id") for series in found) == sorted(medians), (title, found)
