"""The real vLLM engine as users run it on CPU nodes: the CPU runner image (the Dockerfile's `runner-cpu` target,
vLLM's CPU build) on a real kubelet over containerd, a BatchBenchmark with `device: cpu` applied with kubectl to
the operator as the chart installs it, the tests' tiny model served from a PersistentVolumeClaim (`modelCache`)
with the hub offline.

A control plane of its own with one CPU node (the CPU runner image is 7 GB: only this node imports it). In the
vLLM group (tests/xdist_scheduling.py), so that no other engine runs on the two cores meanwhile.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner.observe.statuswriter import read_report_config_map
from devtools.cluster.jobset import JobSet, locate_jobset
from devtools.cluster.volumes import bind_local_volume
from tests.cluster_fixtures import KubeCluster, load_project_image, load_saved_image, start_container_cluster
from tests.integration.operator.conftest import benchmark, kubectl_apply, wait_for_phase, with_the_crd
from tests.integration.operator.installed import InstalledOperator
from tests.integration.process_tree import engine_processes_now, marked_with, still_alive
from tests.integration.vllm.conftest import MAX_MODEL_LEN, SESSION_MARK, SESSION_VARIABLE, VllmSetup, describe
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images, pytest.mark.vllm]

NAMESPACE = "default"
MODELS = "/models"
REQUESTS = 40
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 8


@pytest.fixture(scope="module")
def cpu_cluster(tmp_path_factory: pytest.TempPathFactory, vllm_setup: VllmSetup) -> Iterator[InstalledOperator]:
    """One CPU node holding the CPU runner image, the operator installed by its chart, and the claim `models`
    bound to a local volume holding the tiny model (as an admin copies a model onto a volume)."""
    directory = tmp_path_factory.mktemp("cpu-cluster")
    cluster = start_container_cluster(directory / "cluster", gpu_node_names=(), runner=False)
    try:
        load_project_image(cluster, "operator")
        load_saved_image(cluster, "runner-cpu")
        operator = InstalledOperator(with_the_crd(cluster), directory / "operator")
        operator.install()
        models = directory / "models"
        shutil.copytree(vllm_setup.model, models / "tiny")
        bind_local_volume(cluster, NAMESPACE, "models", models)
        yield operator
    finally:
        cluster.stop()


def spec(**changes: Any) -> dict[str, Any]:
    """A benchmark of the tiny model on cpu, in camelCase as a user writes it."""
    body: dict[str, Any] = {
        "device": "cpu",
        "backend": {
            "model": f"{MODELS}/tiny",
            "engine": "vllm",
            "batchSize": 8,
            "requestFormat": "plain",
            # float32: bfloat16 on a CPU with AMX can die with SIGILL in vLLM's attention kernel.
            "vllmConfig": {"dtype": "float32", "max_model_len": MAX_MODEL_LEN, "seed": 0, "enforce_eager": True},
        },
        "data": {"promptTokens": PROMPT_TOKENS, "outputTokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "maxConcurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
        "modelCache": {"claimName": "models", "mountPath": MODELS},
        # vLLM on a CPU sizes its KV cache from the whole node unless told; the hub is unreachable here.
        # The session's mark: the autouse check of conftest finds the pod's vLLM processes by it, as it does its own.
        "env": [
            {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": SESSION_VARIABLE, "value": SESSION_MARK},
        ],
        # One CPU of quota on a 2-core node: vLLM's compute threads are bound within it (engines.cpu_budget).
        "resources": {"limits": {"cpu": "1", "memory": "8Gi"}, "requests": {"cpu": "1", "memory": "3Gi"}},
        "metrics": {"enabled": False},
    }
    body.update(changes)
    return body


def apply(cluster: KubeCluster, name: str, body: dict[str, Any]) -> None:
    manifest = {"apiVersion": "batchmark.dev/v1alpha1", "kind": "BatchBenchmark", "metadata": {"name": name}}
    applied = kubectl_apply(cluster, NAMESPACE, yaml.safe_dump({**manifest, "spec": body}))
    assert applied.returncode == 0, applied.stderr


def results_report(cluster: KubeCluster, status: dict[str, Any]) -> dict[str, Any]:
    config_map = CoreV1Api(cluster.api_client()).read_namespaced_config_map(status["resultsConfigMap"], NAMESPACE)
    report = read_report_config_map(config_map.to_dict())
    assert report is not None
    return report.model_dump(mode="json")


def test_a_real_vllm_sweep_with_repeats_on_cpu_runs_in_a_pod_and_matches_the_same_run_on_the_machine(
    cpu_cluster: InstalledOperator, vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    """Batch sizes 4 and 8, each measured twice, on one engine load, in the pod as on the machine."""
    cluster = cpu_cluster.cluster
    apply(cluster, "real-engine", spec(sweep={"batchSize": [4, 8]}, repeats=2))
    found = wait_for_phase(cluster, NAMESPACE, "real-engine", {"Succeeded", "Failed"}, timeout_seconds=480)
    status = found["status"]
    assert status["phase"] == "Succeeded", status

    # The pod asked for no GPU, ran the CPU runner image, and was placed on the CPU node.
    pods = CoreV1Api(cluster.api_client()).list_namespaced_pod(
        NAMESPACE, label_selector="batchmark.dev/benchmark=real-engine"
    )
    (pod,) = pods.to_dict()["items"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "batchmark-runner-cpu:0.1.0"
    assert "nvidia.com/gpu" not in (container["resources"]["limits"] or {})
    assert pod["spec"]["node_name"] == "cpu-node-0"

    assert {entry["requests"]["completed"] for entry in status["results"]} == {REQUESTS}
    report = results_report(cluster, status)
    assert report["engine"]["kind"] == "vllm"
    assert report["engine"]["simulated"] is False
    assert len(report["sweep"]["engine_loads"]) == 1  # every point and repeat on the one engine
    # The pod's CPU limit, read from its cgroup, not the node's CPU count: one compute thread, on its first CPU.
    assert (report["engine"]["details"]["cpu_quota"], report["engine"]["details"]["cpu_threads_bind"]) == (1.0, "0")
    measured = report["benchmarks"]
    assert sorted(result["swept"]["batch_size"] for result in measured) == [4, 4, 8, 8]
    for result in measured:
        assert result["requests"] == {"completed": REQUESTS, "errored": 0, "incomplete": 0, "excluded": 0}
        assert result["tokens"]["output"] == REQUESTS * OUTPUT_TOKENS
        assert 0 < result["engine_utilization"] <= 1
        assert result["engine_steps"] >= OUTPUT_TOKENS * REQUESTS / result["swept"]["batch_size"]

    # The same benchmark as `batchmark run` on this machine (the tests' vLLM venv): the same requests and tokens.
    config = {
        "name": "real-engine",
        "backend": vllm_setup.eager_backend(),
        "data": {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
        "sweep": {"batch_size": [4, 8]},
        "repeats": 2,
    }
    ran, local = vllm_setup.batchmark(config, tmp_path)
    assert ran.returncode == 0, describe(ran)
    assert local is not None
    assert [(b["swept"], b["requests"], b["tokens"]) for b in local["benchmarks"]] == [
        (b["swept"], b["requests"], b["tokens"]) for b in measured
    ]
    assert report["engine"]["version"] == local["engine"]["version"]


@pytest.fixture(scope="module")
def cpu_jobset(cpu_cluster: InstalledOperator) -> Iterator[JobSet]:
    """JobSet's controller on the CPU node's control plane, for the benchmarks over several pods."""
    manager = JobSet(cpu_cluster.cluster, locate_jobset())
    try:
        manager.start()
        yield manager
    finally:
        manager.stop()


def test_one_real_vllm_engine_over_two_pods_of_a_jobset_serves_a_benchmark(
    cpu_cluster: InstalledOperator, cpu_jobset: JobSet
) -> None:
    """nodesPerReplica 2: tensor parallel 2 across the JobSet's two pods, vLLM's multiprocessing executor over
    nodes (node 0 runs the benchmark, node 1 only its worker), real tokens, and node 1's pod ends with the engine."""
    cluster = cpu_cluster.cluster
    body = spec(parallelism={"nodesPerReplica": 2})
    body["backend"]["vllmConfig"]["tensor_parallel_size"] = 2
    # Both pods on the one 2-core node: half a CPU each is requested, one of quota each.
    body["resources"] = {"limits": {"cpu": "1", "memory": "6Gi"}, "requests": {"cpu": "500m", "memory": "2Gi"}}
    apply(cluster, "two-nodes", body)
    core = CoreV1Api(cluster.api_client())
    try:
        found = wait_for_phase(cluster, NAMESPACE, "two-nodes", {"Succeeded", "Failed"}, timeout_seconds=300)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{pod_logs(core, 'two-nodes')}") from None
    status = found["status"]
    assert status["phase"] == "Succeeded", f"{status}\n{pod_logs(core, 'two-nodes')}"

    pods = core.list_namespaced_pod(NAMESPACE, label_selector="batchmark.dev/benchmark=two-nodes").to_dict()["items"]
    names = sorted(pod["metadata"]["name"].rsplit("-", 1)[0] for pod in pods)  # less the Job's random suffix
    assert names == ["two-nodes-runner-0-0", "two-nodes-runner-1-0"]
    assert {pod["status"]["phase"] for pod in pods} == {"Succeeded"}
    [other] = [pod["metadata"]["name"] for pod in pods if pod["metadata"]["name"].startswith("two-nodes-runner-1-0")]
    log = core.read_namespaced_pod_log(other, NAMESPACE)
    assert "node 1 of 2 of the engine at two-nodes-runner-0-0.two-nodes:29501: this pod runs its vLLM workers" in log
    assert "node 1 of 2: the engine ended (two-nodes-runner-0-0.two-nodes:29501 stopped answering)" in log

    [result] = status["results"]
    assert result["requests"]["completed"] == REQUESTS
    report = results_report(cluster, status)
    details = report["engine"]["details"]
    assert (details["engine_nodes"], details["rendezvous"]) == (2, "two-nodes-runner-0-0.two-nodes:29501")
    [measured] = report["benchmarks"]
    assert measured["requests"] == {"completed": REQUESTS, "errored": 0, "incomplete": 0, "excluded": 0}
    assert measured["tokens"]["output"] == REQUESTS * OUTPUT_TOKENS


def pod_logs(core: CoreV1Api, benchmark_name: str) -> str:
    """The end of each of the benchmark's pods' logs, for a failure's message."""
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"batchmark.dev/benchmark={benchmark_name}")
    logs = []
    for pod in pods.to_dict()["items"]:
        name = pod["metadata"]["name"]
        try:
            text = core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=40)
        except Exception as error:  # a pod not started yet has no log
            text = f"(no log: {error})"
        logs.append(f"--- {name} ({pod['status']['phase']}) ---\n{text}")
    return "\n".join(logs)


def engine_processes_gone(within: float) -> None:
    """No vLLM process of this session's pods (marked by SESSION_VARIABLE in their environment) runs, or is gone
    within ``within`` seconds."""
    wait_for(
        "the pod's vLLM processes to end",
        lambda: not still_alive(marked_with(engine_processes_now(), SESSION_VARIABLE, SESSION_MARK)) or None,
        within,
    )


def running_with_results(cluster: KubeCluster, name: str, engine_cpus: set[frozenset[int]]) -> None:
    """The benchmark is Running and its engines have completed requests (its live progress says so), vLLM's model
    workers computing on ``engine_cpus`` (one set per engine replica)."""
    found = wait_for_phase(cluster, NAMESPACE, name, {"Running", "Failed", "Succeeded"}, timeout_seconds=300)
    assert found["status"]["phase"] == "Running", found["status"]

    def progressed() -> bool | None:
        status = benchmark(cluster, NAMESPACE, name).get("status") or {}
        return ((status.get("progress") or {}).get("requestsCompleted") or 0) > 0 or None

    wait_for("completed requests in the live progress", progressed, 120)

    # vLLM's engine cores and workers run in the pod, as processes of this machine; each worker computes on the
    # CPUs the pod's quota gives its replica.
    def placed() -> bool | None:
        pods_engine = marked_with(engine_processes_now(), SESSION_VARIABLE, SESSION_MARK)
        workers = [pid for pid in pods_engine if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::Worker")]
        return {frozenset(os.sched_getaffinity(pid)) for pid in workers} == engine_cpus or None

    wait_for(f"vLLM's model workers on {engine_cpus}", placed, 60)


def replicas_that_served(cluster: KubeCluster, name: str, port: int) -> set[str]:
    """The engine replicas with measured successful requests, from the runner's live /metrics (its pod's address)."""
    pods = (
        CoreV1Api(cluster.api_client())
        .list_namespaced_pod(NAMESPACE, label_selector=f"batchmark.dev/benchmark={name}")
        .items
    )
    served: set[str] = set()
    for pod in pods:
        address = pod.status.pod_ip if pod.status is not None else None
        if not address:
            continue
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "batchmark_requests_total" and labels.get("outcome") == "success" and sample.value:
                    served.add(labels["replica"])
    return served


def long_run() -> dict[str, Any]:
    return spec(profile={"kind": "constant", "rate": 5}, constraints=[{"kind": "max_duration", "seconds": 600}])


def test_cancelling_a_running_benchmark_of_two_engine_replicas_writes_their_results_and_ends_every_vllm_process(
    cpu_cluster: InstalledOperator,
) -> None:
    """Two engine replicas in the pod, one CPU of its two-CPU quota each: both serve, both end with the pod.

    At one request a second: vLLM's model workers spin on their CPU for a second after each step, and with both of
    this 2-core node's CPUs theirs, a faster rate would leave the operator beside them next to no CPU at all."""
    cluster = cpu_cluster.cluster
    body = long_run()
    body["profile"] = {"kind": "constant", "rate": 1}
    body["backend"] = {**body["backend"], "replicas": 2}
    body["resources"] = {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "1", "memory": "3Gi"}}
    body["metrics"] = {"enabled": True, "port": 8000, "lingerSeconds": 0}
    apply(cluster, "cancelled", body)
    running_with_results(cluster, "cancelled", {frozenset({0}), frozenset({1})})
    # Both serve before the cancel: the first request a replica gets may take seconds (its first steps).
    both = {"0", "1"}
    wait_for(
        "both replicas to complete requests", lambda: replicas_that_served(cluster, "cancelled", 8000) == both, 180
    )
    patched = cluster.kubectl(
        "patch", "bb", "cancelled", "-n", NAMESPACE, "--type=merge", "-p", '{"spec":{"cancel":true}}'
    )
    assert patched.returncode == 0, patched.stderr
    status = wait_for_phase(cluster, NAMESPACE, "cancelled", {"Cancelled", "Failed"}, timeout_seconds=180)["status"]
    assert status["phase"] == "Cancelled", status
    (partial,) = status["results"]
    assert partial["requests"]["completed"] > 0
    assert "SIGTERM" in partial["stopReason"]
    report = results_report(cluster, status)
    assert (report["engine"]["replicas"], report["engine"]["replica_devices"]) == (2, ["CPUs 0", "CPUs 1"])
    (benchmark_result,) = report["benchmarks"]
    assert [replica["devices"] for replica in benchmark_result["replicas"]] == ["CPUs 0", "CPUs 1"]
    assert all(replica["requests"]["completed"] > 0 for replica in benchmark_result["replicas"])
    engine_processes_gone(within=30)


def test_deleting_the_running_benchmark_ends_every_vllm_process_on_the_node(cpu_cluster: InstalledOperator) -> None:
    cluster = cpu_cluster.cluster
    apply(cluster, "deleted", long_run())
    running_with_results(cluster, "deleted", {frozenset({0})})
    deleted = cluster.kubectl("delete", "bb", "deleted", "-n", NAMESPACE, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    # The kubelet's SIGTERM, then the grace period (children.TERMINATION_GRACE_SECONDS, 60 s) at most.
    engine_processes_gone(within=90)


def test_a_memory_limit_below_the_engines_needs_ends_the_benchmark_oomkilled(cpu_cluster: InstalledOperator) -> None:
    cluster = cpu_cluster.cluster
    apply(cluster, "starved", spec(resources={"limits": {"memory": "1200Mi"}, "requests": {"cpu": "1"}}))
    status = wait_for_phase(cluster, NAMESPACE, "starved", {"Succeeded", "Failed"}, timeout_seconds=300)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "OOMKilled"), status
    engine_processes_gone(within=30)
