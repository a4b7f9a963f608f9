"""Engine replicas in one run (backend.replicas): one load generator feeding N engine workers, each measured, the
sum over one window, a dead replica failing the run by name, every process ended."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.replica_devices import ReplicaDevices
from batchmark.runner.dispatch.replicas import EngineReplicas
from batchmark.runner.dispatch.worker import WorkerFailed
from tests.cli import read_results
from tests.integration.runner.harness import (
    Program,
    assert_clean,
    assert_outputs,
    backend,
    batchmark,
    run_args,
)

pytestmark = pytest.mark.integration


def replicas_of(count: int, **changes: object) -> EngineReplicas:
    config = VllmPythonBatchBackendConfig.model_validate(
        {"model": "m", "engine": "simulated", "batch_size": 4, "batch_timeout": 0.05, **changes}
    )
    return EngineReplicas(config, seed=1, devices=[ReplicaDevices(index) for index in range(count)])


def requests(count: int, first: int = 0) -> list[tuple[RequestSpec, float]]:
    now = time.monotonic()
    return [(RequestSpec(first + index, 32, 16, -1, 0), now) for index in range(count)]


def reports_until(replicas: EngineReplicas, completed: int, timeout: float = 30) -> list[BatchReport]:
    reports: list[BatchReport] = []
    deadline = time.monotonic() + timeout
    while sum(len(report.completions) for report in reports) < completed:
        assert time.monotonic() < deadline, f"only {sum(len(r.completions) for r in reports)} of {completed} came"
        reports += [message for message in replicas.receive(0.5) if isinstance(message, BatchReport)]
    return reports


def test_requests_go_to_the_replica_with_the_fewest_in_flight_and_reports_name_their_replica() -> None:
    replicas = replicas_of(3, simulation={"time_scale": 1.0})
    try:
        ready = replicas.start()
        assert ready is not None
        assert len({loaded.pid for loaded in ready.replicas}) == 3
        replicas.submit(requests(30))
        assert replicas.in_flight == [10, 10, 10]
        reports = reports_until(replicas, 30)
        served = {
            index: {c.request_id for r in reports if r.replica == index for c in r.completions} for index in range(3)
        }
        assert [len(ids) for ids in served.values()] == [10, 10, 10]
        assert set().union(*served.values()) == set(range(30))
        assert replicas.in_flight == [0, 0, 0]
        # One request at a time, each done before the next (a low rate): every replica is idle each time, and
        # they take turns.
        served_alone = []
        for request_id in range(50, 56):
            replicas.submit(requests(1, first=request_id))
            served_alone += [report.replica for report in reports_until(replicas, 1)]
        assert served_alone == [0, 1, 2, 0, 1, 2]
        # Every replica is fed by the new settings, and drained together.
        replicas.reconfigure(batch_size=2, batch_timeout=0.05, dispatch="batch")
        replicas.submit(requests(12, first=100))
        reports = reports_until(replicas, 12)
        assert {len(report.completions) for report in reports} == {2}
        replicas.submit(requests(60, first=200))
        replicas.drain()
        assert replicas.in_flight == [0, 0, 0]
    finally:
        replicas.close()
    for pid in replicas.pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_replica_that_cannot_load_fails_the_start_naming_it_and_every_replica_is_ended() -> None:
    config = VllmPythonBatchBackendConfig.model_validate({"model": "m", "engine": "simulated"})
    # A CPU no machine here has: the second replica's worker cannot move onto it.
    devices = [ReplicaDevices(0), ReplicaDevices(1, cpus=frozenset({4095}))]
    replicas = EngineReplicas(config, seed=1, devices=devices)
    try:
        with pytest.raises(WorkerFailed, match=r"replica 1 of 2 \(CPUs 4095\): simulated: OSError"):
            replicas.start()
    finally:
        replicas.close()
    for pid in replicas.pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_three_replicas_serve_three_times_one_and_the_aggregate_is_their_sum(tmp_path: Path) -> None:
    """One run, one load generator: a sweep over replicas=1,3 on the simulated engine, whose cost model makes
    replicas independent."""
    outputs = [tmp_path / "r.json", tmp_path / "r.html"]
    args = run_args(
        backend(time_scale=1),
        profile="kind=throughput,max_concurrency=48",
        constraint="kind=max_requests,count=480",
        outputs=outputs,
        extra=["--sweep", "replicas=1,3"],
    )
    outcome = batchmark(tmp_path, args)
    assert outcome.code == 0, outcome.stderr
    assert_clean(outcome)
    assert_outputs(outputs, complete=True, benchmarks=2)
    one, three = read_results(outputs[0])["benchmarks"]
    assert one["replicas"] is None
    replicas = three["replicas"]
    assert [replica["replica"] for replica in replicas] == [0, 1, 2]
    assert {replica["devices"] for replica in replicas} == {"no device"}
    assert sum(replica["requests"]["completed"] for replica in replicas) == three["requests"]["completed"] == 480
    assert min(replica["requests"]["completed"] for replica in replicas) >= 480 / 3 * 0.8
    summed = sum(replica["throughput"]["output_tokens_per_second"] for replica in replicas)
    assert three["throughput"]["output_tokens_per_second"] == pytest.approx(summed, rel=0.1)
    summary = three["replica_summary"]
    assert summary["count"] == 3
    assert summary["straggler_ratio"] >= 1.0
    ratio = three["throughput"]["output_tokens_per_second"] / one["throughput"]["output_tokens_per_second"]
    assert ratio >= 2.7
    assert summary["scaling_efficiency"] == pytest.approx(ratio / 3)
    assert "engine replicas" in outcome.stdout
    assert 'id="replicas"' in outputs[1].read_text()


def test_a_replica_dying_fails_the_run_naming_it_and_keeps_every_replicas_figures(tmp_path: Path) -> None:
    outputs = [tmp_path / "r.json"]
    args = run_args(backend(time_scale=1, replicas=3), constraint="kind=max_duration,seconds=120", outputs=outputs)
    program = Program(tmp_path, args)
    program.wait_for("benchmark 1")
    workers = program.workers(3)
    time.sleep(1.0)
    os.kill(workers[1], signal.SIGKILL)
    outcome = program.finish()
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    assert "the engine failed: replica " in outcome.message
    assert " of 3 (no device): the engine worker process exited unexpectedly (killed by SIGKILL)" in outcome.message
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason="killed by SIGKILL")
    [benchmark] = read_results(outputs[0])["benchmarks"]
    assert benchmark["interrupted"] is True
    assert len(benchmark["replicas"]) == 3
    assert all(replica["requests"]["completed"] > 0 for replica in benchmark["replicas"])


def test_two_runs_measured_apart_merge_into_one_fleets_result(tmp_path: Path) -> None:
    """Two engines run by hand, as users script them on two machines: `batchmark merge` sums them over the window
    both measured."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    args = {
        path: run_args(backend(time_scale=1), constraint="kind=max_duration,seconds=6", outputs=[path])
        for path in (first, second)
    }
    started = Program(tmp_path, args[first])
    started.wait_for("benchmark 1")
    time.sleep(1.0)
    later = Program(tmp_path, args[second])
    for program in (started, later):
        outcome = program.finish()
        assert outcome.code == 0, outcome.stderr
    merged_json, merged_html = tmp_path / "m.json", tmp_path / "m.html"
    outcome = batchmark(tmp_path, ["merge", str(first), str(second), "-o", str(merged_json), "-o", str(merged_html)])
    assert outcome.code == 0, outcome.stderr
    assert_clean(outcome)
    runs = [read_results(path)["benchmarks"][0] for path in (first, second)]
    [merged] = read_results(merged_json)["benchmarks"]
    summary = merged["replica_summary"]
    assert summary["count"] == 2
    assert 0.5 <= summary["start_skew_seconds"] <= 6
    assert merged["measured_duration"] == pytest.approx(6 - summary["start_skew_seconds"], abs=0.5)
    # Each engine serves at its own steady rate: the fleet's rate over the shared window is their sum.
    summed = sum(run["throughput"]["output_tokens_per_second"] for run in runs)
    assert merged["throughput"]["output_tokens_per_second"] == pytest.approx(summed, rel=0.1)
    assert [replica["devices"] for replica in merged["replicas"]] == [
        "a: simulated H100-class GPU",
        "b: simulated H100-class GPU",
    ]
    count = merged["distributions"]["request_latency"]["count"]
    assert count == sum(run["distributions"]["request_latency"]["count"] for run in runs)
    assert "engine replicas" in outcome.stdout
    assert 'id="replicas"' in merged_html.read_text()


def test_the_async_backend_streams_through_every_replica(tmp_path: Path) -> None:
    """backend.replicas with the async backend: each replica is its own AsyncLLM worker, each request streamed by
    the one it went to; the figures are whole (every request's first token and intervals) and every replica's part
    adds up to the run's."""
    outputs = [tmp_path / "r.json"]
    args = run_args(
        backend(dispatch="stream", replicas=2),
        profile="kind=throughput,max_concurrency=32",
        constraint="kind=max_requests,count=300",
        outputs=outputs,
    )
    outcome = batchmark(tmp_path, args)
    assert outcome.code == 0, outcome.stderr
    assert_clean(outcome)
    assert_outputs(outputs, complete=True, benchmarks=1)
    results = read_results(outputs[0])
    assert results["dispatch"] == "stream"
    [benchmark] = results["benchmarks"]
    replicas = benchmark["replicas"]
    assert [replica["replica"] for replica in replicas] == [0, 1]
    assert all(replica["requests"]["completed"] > 0 for replica in replicas)
    assert sum(replica["requests"]["completed"] for replica in replicas) == benchmark["requests"]["completed"] == 300
    assert sum(replica["tokens"]["output"] for replica in replicas) == benchmark["tokens"]["output"]
    distributions = benchmark["distributions"]
    assert distributions["time_to_first_token"]["count"] == 300
    assert distributions["inter_token_latency"]["count"] == benchmark["tokens"]["output"] - 300
    assert benchmark["replica_summary"]["count"] == 2
