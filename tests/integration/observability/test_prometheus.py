"""Live metrics through a real Prometheus, and the final results through a real Pushgateway."""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.cluster.controlplane import free_port
from tests.cli import Finished, command, read_results, run_program
from tests.integration.observability.servers import (
    http_get,
    prometheus,
    promtool_check_metrics,
    pushgateway,
    stop,
)

pytestmark = pytest.mark.integration

MODEL = "Qwen/Qwen3-0.6B"
# time_scale=1: the simulated engine sleeps as long as its model says, so the run lasts about 8 s and
# Prometheus, scraping every second, sees the counters climb.
REAL_TIME_BACKEND = f"kind=vllm_python_batch,model={MODEL},batch_size=8,engine=simulated,simulation.time_scale=1"
FAST_BACKEND = f"kind=vllm_python_batch,model={MODEL},batch_size=8,engine=simulated,simulation.time_scale=0"
DATA = "kind=synthetic_text,prompt_tokens=256,output_tokens=64"
SCRAPE_SECONDS = 1.0
# Prometheus stamps a sample when the scrape starts; the body is read a little later.
CLOCK_SLACK = 0.25


def test_live_metrics_reach_prometheus_and_match_the_report(tmp_path: Path) -> None:
    port = free_port()
    results = tmp_path / "results.json"
    with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], scrape_interval=f"{SCRAPE_SECONDS:g}s") as prom:
        launched = time.time()
        expositions = run_serving_metrics(results, port)
        report = read_results(results)
        run_id = report["run_id"]
        (benchmark,) = report["benchmarks"]
        selector = f'{{benchmark="live-metrics",run_id="{run_id}"}}'

        # The final sample of the counter is the report's figure.
        tokens = prom.samples(f"batchmark_output_tokens_total{selector}")
        final = benchmark["tokens"]["output"]
        assert tokens[-1][1] == final
        assert prom.samples(f"batchmark_prompt_tokens_total{selector}")[-1][1] == benchmark["tokens"]["prompt"]
        success = f'batchmark_requests_total{{benchmark="live-metrics",run_id="{run_id}",outcome="success"}}'
        assert prom.samples(success)[-1][1] == benchmark["requests"]["completed"]
        latency_count = prom.samples(f"batchmark_request_latency_seconds_count{selector}")
        assert latency_count[-1][1] == benchmark["requests"]["completed"]
        batches = prom.samples(f"batchmark_effective_batch_size_count{selector}")
        assert batches[-1][1] == benchmark["batches"]
        done = f'batchmark_phase{{benchmark="live-metrics",run_id="{run_id}",phase="done"}}'
        assert prom.samples(done)[-1][1] == 1
        measuring = f'batchmark_phase{{benchmark="live-metrics",run_id="{run_id}",phase="measuring"}}'
        assert max(value for _, value in prom.samples(measuring)) == 1  # seen while it ran
        load_seconds = prom.samples(f"batchmark_engine_load_seconds{selector}")[-1][1]
        assert load_seconds == pytest.approx(report["engine"]["load_seconds"])
        in_flight = prom.samples(f"batchmark_requests_in_flight{selector}")
        assert max(value for _, value in in_flight) > 0
        (info,) = prom.query(f"last_over_time(batchmark_info{selector}[10m])")
        assert {key: info["metric"][key] for key in ("model", "backend", "engine", "batch_size")} == {
            "model": MODEL,
            "backend": "vllm_python_batch",
            "engine": "simulated",
            "batch_size": "8",
        }
        assert info["metric"]["version"] == report["batchmark_version"]

        assert_rate_bracketed(tokens, launched, benchmark)
        # PromQL's own view of the same: the increase Prometheus saw over the run is every token.
        (increase,) = prom.query(f"max_over_time(batchmark_output_tokens_total{selector}[10m])")
        assert float(increase["value"][1]) == final

    # promtool lints what the exporter served while the benchmark ran and at its end.
    assert len(expositions) >= 2
    for exposition in (expositions[len(expositions) // 2], expositions[-1]):
        checked = promtool_check_metrics(exposition)
        assert checked.returncode == 0, checked
        assert checked.stdout == b"", checked
        assert checked.stderr == b"", checked


def run_serving_metrics(results: Path, port: int) -> list[bytes]:
    """A real-time run serving /metrics on ``port`` until it ends; what /metrics served while it ran, for promtool."""
    run = subprocess.Popen(
        command(
            "run",
            "--quiet",
            "--name",
            "live-metrics",
            "--backend",
            REAL_TIME_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=16",
            "--constraint",
            "kind=max_requests,count=240",
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
    expositions: list[bytes] = []
    try:
        while run.poll() is None:  # keep what /metrics served mid-run and at the end, for promtool
            with contextlib.suppress(OSError):  # not listening yet, or already gone
                expositions.append(http_get(f"http://127.0.0.1:{port}/metrics", timeout=2))
            time.sleep(0.5)
        _, stderr = run.communicate(timeout=30)
    finally:
        stop(run)
    assert run.returncode == 0, stderr
    return expositions


def assert_rate_bracketed(tokens: list[tuple[float, float]], launched: float, benchmark: dict[str, Any]) -> None:
    final = benchmark["tokens"]["output"]
    # The rate over the run: Prometheus only knows the counter at its scrapes, so the time the tokens took
    # is bracketed: more than between the first scrape that saw tokens and the last that saw the count
    # short of final, less than between the last scrape at zero (or the launch) and the first at final.
    # The report's window adds the first batch's latency (requests enqueued before any completed).
    last_zero = max([launched] + [t for t, v in tokens if v == 0])
    first_final = min(t for t, v in tokens if v == final)
    first_tokens = min(t for t, v in tokens if v > 0)
    last_short = max(t for t, v in tokens if v < final)
    measured = benchmark["measured_duration"]
    first_batch = benchmark["distributions"]["request_latency"]["max"]
    assert measured > 5 * SCRAPE_SECONDS  # long enough for the bracket to mean something
    assert last_short - first_tokens - CLOCK_SLACK <= measured
    assert measured <= first_final - last_zero + first_batch + CLOCK_SLACK
    # Prometheus' rate takes its window from the last scrape at zero to the first at final; the report's lies
    # in the bracket above, so the two rates differ by at most that bracket's slack on this window, however
    # late a loaded machine made the scrapes (a fixed allowance of a few scrape intervals assumed them on time).
    window = first_final - last_zero
    slack = max(window - (last_short - first_tokens - CLOCK_SLACK), first_batch + CLOCK_SLACK)
    prometheus_rate = final / window
    report_rate = benchmark["throughput"]["output_tokens_per_second"]
    assert prometheus_rate == pytest.approx(report_rate, rel=slack / window)


def push_run(gateway: str, output: Path, *backend_extra: str) -> Finished:
    return run_program(
        [
            "run",
            "--quiet",
            "--name",
            "pushed",
            "--backend",
            ",".join([FAST_BACKEND, *backend_extra]),
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=16",
            "--constraint",
            "kind=max_requests,count=50",
            "--output",
            str(output),
            "--pushgateway",
            gateway,
        ]
    )


def gateway_values(gateway: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """What the Pushgateway serves, keyed by (name, labels) for the pushed group only."""
    values = {}
    for family in text_string_to_metric_families(http_get(f"{gateway}/metrics").decode()):
        for sample in family.samples:
            if sample.labels.get("job") == "batchmark" and sample.labels.get("benchmark") == "pushed":
                values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


def value(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    # The gateway adds instance; every result series carries the benchmark's batch size and other swept values.
    wanted = {"job": "batchmark", "benchmark": "pushed", "instance": "", **labels}
    if "strategy" in labels:
        wanted = {"batch_size": "8", "swept": "", **wanted}
    matches = [v for (metric, found), v in values.items() if metric == name and dict(found) == wanted]
    assert len(matches) == 1, f"{name}{labels}: {matches} in {sorted(k[0] for k in values)}"
    return matches[0]


def test_pushgateway_keeps_the_last_success_when_a_run_fails(tmp_path: Path) -> None:
    with pushgateway(tmp_path / "pushgateway") as gateway:
        gateway_port = gateway.rsplit(":", 1)[1]
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{gateway_port}"], honor_labels=True) as prom:
            before = time.time()
            good = push_run(gateway, tmp_path / "good.json")
            after = time.time()
            assert good.code == 0, good.stderr
            assert "pushed results" in good.stderr
            report = read_results(tmp_path / "good.json")
            (benchmark,) = report["benchmarks"]
            strategy = benchmark["strategy"]
            pushed = gateway_values(gateway)
            success_at = value(pushed, "batchmark_last_success_timestamp_seconds")
            assert before <= success_at <= after
            throughput = benchmark["throughput"]
            for name, field in (
                ("batchmark_result_output_tokens_per_second", "output_tokens_per_second"),
                ("batchmark_result_requests_per_second", "requests_per_second"),
                ("batchmark_result_total_tokens_per_second", "total_tokens_per_second"),
            ):
                assert value(pushed, name, strategy=strategy) == pytest.approx(throughput[field], rel=1e-12)
            for outcome, count in (("success", "completed"), ("error", "errored"), ("incomplete", "incomplete")):
                got = value(pushed, "batchmark_result_requests", strategy=strategy, outcome=outcome)
                assert got == benchmark["requests"][count]
            latency = benchmark["distributions"]["request_latency"]
            for quantile, field in (("0.5", "median"), ("0.99", "p99")):
                got = value(pushed, "batchmark_result_request_latency_seconds", strategy=strategy, quantile=quantile)
                assert got == pytest.approx(latency[field], rel=1e-12)
            assert value(pushed, "batchmark_result_duration_seconds", strategy=strategy) == pytest.approx(
                benchmark["duration"], rel=1e-12
            )

            # Every request fails (prompts longer than the model's context): the run ends, but failed.
            bad = push_run(gateway, tmp_path / "bad.json", "vllm_config.max_model_len=64")
            assert bad.code == 0, bad.stderr
            assert read_results(tmp_path / "bad.json")["benchmarks"][0]["requests"]["completed"] == 0
            assert "pushed the failure" in bad.stderr
            after_failure = gateway_values(gateway)
            assert value(after_failure, "batchmark_last_success_timestamp_seconds") == success_at
            assert value(after_failure, "batchmark_last_failure_timestamp_seconds") > success_at
            for key, kept in pushed.items():  # every result of the good run is still there, unchanged
                if key[0] != "push_time_seconds":
                    assert after_failure[key] == kept, key

            # Prometheus scraping the gateway sees the same.
            deadline = time.time() + 15
            while True:
                found = prom.query('batchmark_last_success_timestamp_seconds{job="batchmark",benchmark="pushed"}')
                failure = prom.query('batchmark_last_failure_timestamp_seconds{job="batchmark",benchmark="pushed"}')
                if found and failure:
                    break
                assert time.time() < deadline, "Prometheus never scraped the pushed results"
                time.sleep(0.5)
            assert float(found[0]["value"][1]) == success_at


def test_a_push_that_fails_warns_and_keeps_the_results(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    result = push_run(closed, tmp_path / "r.json")
    assert result.code == 0, result.stderr
    assert "warning: could not push to the Pushgateway" in result.message
    assert read_results(tmp_path / "r.json")["complete"] is True
    assert time.monotonic() - started >= 1 + 2 + 4  # it retried with back-off before giving up
