"""A simulated benchmark the operator runs as a Job on the session's kubelets, long enough to look at its pod
while it runs, and the checks the identity tests make on it (test_containers_runtime, test_benchmark_pod_identity,
test_model_cache_pvc)."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes.client import CoreV1Api

from batchmark.operator.controller.status import RUNNER_CONTAINER
from batchmark.runner.observe.statuswriter import read_report_config_map
from devtools.cluster import images
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import example, kubectl_apply, wait_for_phase
from tests.polling import wait_for

# The image's user writes its home, every cache the engines use and its working directory.
WRITES = f"set -e; {images.write_every_cache()} && touch ./written && echo written"


def pod_of(cluster: KubeCluster, namespace: str, name: str) -> Any:
    """The benchmark's pod, or None before there is one."""
    pods = (
        CoreV1Api(cluster.api_client())
        .list_namespaced_pod(namespace, label_selector=f"batchmark.dev/benchmark={name}")
        .items
    )
    return pods[0] if pods else None


def apply_watched_benchmark(cluster: KubeCluster, namespace: str, name: str, seconds: float = 20, **spec: Any) -> None:
    """The simulated example at 10 requests/s for `seconds` (long enough to look at its pod while it runs), with
    `spec`'s fields set over it."""
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["profile"] = {"kind": "constant", "rate": 10}
    manifest["spec"]["constraints"] = [{"kind": "max_duration", "seconds": seconds}]
    manifest["spec"].update(spec)
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump(manifest))
    assert applied.returncode == 0, applied.stderr


def apply_stepped_benchmark(
    cluster: KubeCluster, namespace: str, name: str, step_seconds: float, results: dict[str, Any], **spec: Any
) -> None:
    """Three repeats of a short run whose every engine step takes ``step_seconds`` (slept in full, so that the
    machine's load moves its throughput little), its runs kept where ``results`` says (spec.results); ``spec``
    adds fields or replaces these."""
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"].update(
        {
            "backend": {
                "kind": "vllm_python_batch",
                "model": "Qwen/Qwen3-0.6B",
                "engine": "simulated",
                "batchSize": 16,
                "simulation": {"timeScale": 1, "stepFixedSeconds": step_seconds},
            },
            "data": {"kind": "synthetic_text", "promptTokens": 32, "outputTokens": 16},
            "profile": {"kind": "throughput", "maxConcurrency": 32},
            "constraints": [{"kind": "max_requests", "count": 64}],
            "repeats": 3,
            "results": results,
            **spec,
        }
    )
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump(manifest))
    assert applied.returncode == 0, applied.stderr


def running_pod(cluster: KubeCluster, namespace: str, name: str) -> Any:
    """The benchmark's pod once the benchmark is Running."""
    wait_for_phase(cluster, namespace, name, {"Running"}, timeout_seconds=120)
    return wait_for("the benchmark's pod", lambda: pod_of(cluster, namespace, name), 30)


def assert_writes_home_and_caches(cluster: KubeCluster, namespace: str, pod: Any) -> None:
    """The runner container's user writes its home, working directory and every cache the engines use."""
    written = cluster.kubectl(
        "exec", "-n", namespace, pod.metadata.name, "-c", RUNNER_CONTAINER, "--", "sh", "-c", WRITES, check=False
    )
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == "written"


def assert_succeeds_with_results(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The benchmark ends Succeeded with completed requests in its status and in the full report of its results
    ConfigMap (which only the runner writes, through the API server, with the pod's service-account token)."""
    found = wait_for_phase(cluster, namespace, name, {"Succeeded", "Failed"}, timeout_seconds=180)
    assert found["status"]["phase"] == "Succeeded", found["status"]
    assert found["status"]["results"][0]["requests"]["completed"] > 0
    config_map = CoreV1Api(cluster.api_client()).read_namespaced_config_map(
        found["status"]["resultsConfigMap"], namespace
    )
    report = read_report_config_map(config_map.to_dict())
    assert report is not None
    assert report.benchmarks[0].requests.completed > 0
    return found
