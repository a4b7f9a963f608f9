"""Every benchmark ends, on real kubelets over containerd: a pod that never starts — its image never pulls, a
root image under runAsNonRoot, no node takes it, a retry's pod no node takes — ends its benchmark Failed within
its start bound (spec.timeouts, short here so that the tests take seconds) with the kubelet's or the scheduler's
reason and a Warning event, its Job stopped; a benchmark queued in the real Kueue longer than its bound runs all
the same, for time queued never counts. The decisions themselves: tests/unit/operator/test_start_bounds.py."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import BatchV1Api, CoreV1Api
from prometheus_client.parser import text_string_to_metric_families

from devtools.cluster.controlplane import locate_runtime_binaries
from devtools.cluster.ociarchive import write_image_archive
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.test_kueue_queueing import ClusterObjects, gpu_queue, objects, queued_run
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

__all__ = ["objects"]  # the fixture, used by name

BOUND = 5  # seconds: each test's spec.timeouts
# The retry's: long enough for its waiting, with reason Retrying, to be seen before it ends.
RETRY_BOUND = 15
# What may come on top of the bound: the operator's clock ticks each second, then a status patch and the watch.
SLACK = 10


def short_run(name: str, seconds: float | None = None, **spec: Any) -> dict[str, Any]:
    """The simulated example (one fake GPU), short, or running for ``seconds``."""
    manifest = example("simulated-throughput.yaml", name=name)
    if seconds is None:
        manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 40}]
    else:
        manifest["spec"]["constraints"] = [{"kind": "max_duration", "seconds": seconds}]
        manifest["spec"]["profile"] = {"kind": "constant", "rate": 20}
    manifest["spec"].update(spec)
    return manifest


def apply(cluster: KubeCluster, namespace: str, *manifests: dict[str, Any]) -> float:
    """Apply the manifests; when they were applied (time.monotonic())."""
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump_all(manifests))
    assert applied.returncode == 0, applied.stderr
    return time.monotonic()


def warnings_of(cluster: KubeCluster, namespace: str, name: str) -> list[tuple[str, str]]:
    listing = CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=BatchBenchmark,involvedObject.name={name}"
    )
    return [(event.reason or "", event.message or "") for event in listing.items if event.type == "Warning"]


def pods_of(cluster: KubeCluster, namespace: str, name: str) -> list[Any]:
    listing = CoreV1Api(cluster.api_client()).list_namespaced_pod(
        namespace, label_selector=f"batchmark.dev/benchmark={name}"
    )
    return list(listing.items)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(entry for entry in status["conditions"] if entry["type"] == kind)
    return found


def assert_ended_at_its_bound(
    cluster: KubeCluster, namespace: str, name: str, applied: float, reasons: set[str], timeout: str, said: str
) -> dict[str, Any]:
    """The benchmark ends Failed with one of ``reasons`` within its bound (from its application, which is before
    its pod's clock starts) and a little slack, with a Warning event; its Job is stopped, so its pod goes."""
    found = wait_for_phase(cluster, namespace, name, {"Failed", "Succeeded"}, BOUND + SLACK + 30)
    took = time.monotonic() - applied
    status: dict[str, Any] = found["status"]
    assert (status["phase"], status["reason"] in reasons) == ("Failed", True), status
    assert took <= BOUND + SLACK + 5, f"ended {took:.1f} s after it was applied, its bound is {BOUND} s"
    assert status["message"].startswith(f"not started within spec.timeouts.{timeout} ({BOUND} s): "), status
    assert said in status["message"], status
    assert condition(status, "Failed")["reason"] == status["reason"]
    assert status["attempts"] == 1
    started = datetime.datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
    ended = datetime.datetime.fromisoformat(status["completionTime"].replace("Z", "+00:00"))
    assert (ended - started).total_seconds() >= BOUND  # not before its bound either

    def warned() -> bool:
        return any(
            reason == "Failed" and message.startswith(f"{status['reason']}: not started within")
            for reason, message in warnings_of(cluster, namespace, name)
        )

    wait_for("the Warning event Failed", warned, 10)
    job = BatchV1Api(cluster.api_client()).read_namespaced_job(name, namespace)
    assert job.spec is not None
    assert job.spec.suspend is True
    wait_for("the stopped Job's pod to go", lambda: not pods_of(cluster, namespace, name), 30)
    return status


def test_an_image_that_never_pulls_ends_failed_with_the_kubelets_reason(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    image = "localhost/does-not-exist:1"  # no registry answers for localhost: the pull fails at once
    applied = apply(cluster, kube_namespace, short_run("unpullable", image=image, timeouts={"imagePull": BOUND}))
    reasons = {"ErrImagePull", "ImagePullBackOff"}
    status = assert_ended_at_its_bound(
        cluster, kube_namespace, "unpullable", applied, reasons, "imagePull", f'image "{image}"'
    )
    assert condition(status, "Scheduled")["status"] == "True"
    assert condition(status, "Retrying")["status"] == "False"
    batchmark_operator.assert_alive()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"nodeSelector": {"batchmark.dev/test-no-such-node": "true"}}, "didn't match Pod's node affinity/selector"),
        ({"resources": {"limits": {"nvidia.com/gpu": 64}}}, "Insufficient nvidia.com/gpu"),
    ],
    ids=["node-selector", "more-gpus-than-any-node"],
)
def test_a_pod_no_node_takes_ends_failed_unschedulable(
    batchmark_operator: InstalledOperator, kube_namespace: str, spec: dict[str, Any], said: str
) -> None:
    cluster = batchmark_operator.cluster
    applied = apply(cluster, kube_namespace, short_run("nowhere", timeouts={"pending": BOUND}, **spec))
    status = assert_ended_at_its_bound(cluster, kube_namespace, "nowhere", applied, {"Unschedulable"}, "pending", said)
    assert condition(status, "Scheduled")["status"] == "False"


@pytest.fixture
def root_image(kube_cluster: KubeCluster, tmp_path: Path) -> str:
    """An image whose user is root (no USER), on the nodes."""
    image = "localhost/batchmark-root:test"
    archive = tmp_path / "root.tar"
    write_image_archive(archive, image, {"/pause": (locate_runtime_binaries().pause, 0o755)}, ["/pause"])
    kube_cluster.load_images([archive])
    return image


@pytest.fixture
def platform_ids_operator(batchmark_operator: InstalledOperator) -> Iterator[InstalledOperator]:
    """The operator upgraded with every ID of the pods null (OpenShift's values): the image's user is the pod's,
    so a root image meets runAsNonRoot, which the operator always sets."""
    ids = {"runAsUser": None, "runAsGroup": None, "fsGroup": None}
    with batchmark_operator.reconfigured({"benchmarkDefaults": {"securityContext": ids}}) as operator:
        yield operator


@pytest.mark.images
def test_a_root_image_under_run_as_non_root_ends_failed_create_container_config_error(
    platform_ids_operator: InstalledOperator, kube_namespace: str, root_image: str
) -> None:
    cluster = platform_ids_operator.cluster
    manifest = short_run("as-root", image=root_image, timeouts={"containerCreate": BOUND})
    applied = apply(cluster, kube_namespace, manifest)
    assert_ended_at_its_bound(
        cluster,
        kube_namespace,
        "as-root",
        applied,
        {"CreateContainerConfigError"},
        "containerCreate",
        "container has runAsNonRoot and image will run as root",
    )
    platform_ids_operator.assert_alive()


def starting_series(operator: InstalledOperator, namespace: str, name: str) -> float | None:
    """The operator's batchmark_operator_benchmark_starting for the benchmark (the stuck-scheduling alert's)."""
    for family in text_string_to_metric_families(operator.metrics()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "batchmark_operator_benchmark_starting" and labels == {
                "namespace": namespace,
                "name": name,
            }:
                return float(sample.value)
    return None


@pytest.fixture
def node_label(kube_cluster: KubeCluster) -> Iterator[tuple[str, str]]:
    """A label of this test's own on the first GPU node (node, label key), removed afterwards."""
    node, key = kube_cluster.gpu_node_names[0], f"batchmark.dev/test-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("label", "node", node, f"{key}=true")
    try:
        yield node, key
    finally:
        kube_cluster.kubectl("label", "node", node, f"{key}-", check=False)


def test_a_retry_whose_pod_no_node_takes_says_retrying_then_ends_failed(
    batchmark_operator: InstalledOperator, kube_namespace: str, node_label: tuple[str, str]
) -> None:
    cluster = batchmark_operator.cluster
    node, key = node_label
    bound = {"pending": RETRY_BOUND}
    manifest = short_run("retried", seconds=120, retries=1, nodeSelector={key: "true"}, timeouts=bound)
    apply(cluster, kube_namespace, manifest)
    running = wait_for_phase(cluster, kube_namespace, "retried", {"Running"}, 120)["status"]
    first_pod = running["podName"]
    # The node no longer matches (the running pod stays: selectors count at scheduling only); the pod is
    # deleted, as a node drain does: the Job's next pod waits for a node that never comes.
    cluster.kubectl("label", "node", node, f"{key}-")
    cluster.kubectl("delete", "pod", first_pod, "-n", kube_namespace, "--grace-period=1", "--wait=false")

    def retrying() -> dict[str, Any] | None:
        status: dict[str, Any] = benchmark(cluster, kube_namespace, "retried").get("status") or {}
        waiting = status.get("podName") not in (None, first_pod) and "Unschedulable" in status.get("message", "")
        return status if waiting or status.get("phase") == "Failed" else None

    status = wait_for("the retry's pod to wait for a node", retrying, 90)
    # The phase the benchmark reached stays, with a reason that says so; the attempts and the condition count it.
    assert (status["phase"], status["reason"]) == ("Running", "Retrying"), status
    assert status["attempts"] == 2
    assert condition(status, "Retrying")["status"] == "True"
    assert condition(status, "Retrying")["message"].startswith("1 of at most 2 attempts failed, the Job runs another")
    assert starting_series(batchmark_operator, kube_namespace, "retried") == 1  # the stuck-scheduling alert's
    assert any(reason == "Retrying" for reason, _ in warnings_of(cluster, kube_namespace, "retried"))

    found = wait_for_phase(cluster, kube_namespace, "retried", {"Failed", "Succeeded"}, RETRY_BOUND + SLACK + 30)
    found = found["status"]
    assert (found["phase"], found["reason"]) == ("Failed", "Unschedulable"), found
    assert found["message"].startswith(f"not started within spec.timeouts.pending ({RETRY_BOUND} s): ")
    assert found["attempts"] == 2
    assert condition(found, "Retrying")["status"] == "False"
    assert starting_series(batchmark_operator, kube_namespace, "retried") is None


def test_time_queued_in_kueue_never_counts_toward_the_bound(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1)
    apply(cluster, kube_namespace, queued_run("first", seconds=4 * BOUND))
    wait_for_phase(cluster, kube_namespace, "first", {"Running", "LoadingEngine"}, 120)
    bounds = {"pending": BOUND, "imagePull": BOUND, "containerCreate": BOUND}
    applied = apply(cluster, kube_namespace, queued_run("second", seconds=1, timeouts=bounds))

    def admitted() -> dict[str, Any] | None:
        status: dict[str, Any] = benchmark(cluster, kube_namespace, "second").get("status") or {}
        return status if status.get("phase") not in (None, "Pending", "Queued") else None

    wait_for("the second benchmark to be admitted", admitted, 180)
    queued_for = time.monotonic() - applied
    assert queued_for > 2 * BOUND, f"queued only {queued_for:.1f} s: the test proves nothing"
    found = wait_for_phase(cluster, kube_namespace, "second", {"Succeeded", "Failed"}, 180)["status"]
    assert found["phase"] == "Succeeded", found
    assert found["attempts"] == 1
    assert wait_for_phase(cluster, kube_namespace, "first", {"Succeeded", "Failed"}, 120)["status"]["phase"] == (
        "Succeeded"
    )
