"""Benchmarks over several pods on the real control plane: the operator (as the chart installs it) makes one JobSet,
the real JobSet controller runs its pods on the kubelets, the pods hand their reports to pod 0 over the pod network
and pod 0 writes the benchmark's results, merged over the window they all measured; a pod that fails fails the
benchmark, naming the pod; Kueue admits the whole group or none of it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi, V1ConfigMap, V1ObjectMeta

from devtools.cluster.jobset import JobSet
from devtools.cluster.kueue import KUEUE_API_VERSION, Kueue, cluster_queue
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import benchmark, example, wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.test_kueue_queueing import ClusterObjects, gpu_queue
from tests.integration.operator.test_operator_data import JSONL
from tests.integration.operator.test_operator_e2e import apply, results_report
from tests.polling import CLUSTER_PATIENCE_SECONDS, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def fleet(name: str, replicas: int, per_pod: int = 1, seconds: float = 10, **spec: Any) -> dict[str, Any]:
    """The simulated example (one fake GPU a pod), as fast as its engine serves for ``seconds``: at the simulated
    engine's own speed (timeScale 1), so that each replica's throughput is its engine's, not the 2 cores'."""
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["backend"]["simulation"] = {"timeScale": 1.0}
    manifest["spec"]["constraints"] = [{"kind": "max_duration", "seconds": seconds}]
    if replicas > 1:
        manifest["spec"]["parallelism"] = {"replicas": replicas, "replicasPerPod": per_pod}
    manifest["spec"].update(spec)
    return manifest


def pods_of(cluster: KubeCluster, namespace: str, name: str) -> list[Any]:
    return list(
        CoreV1Api(cluster.api_client())
        .list_namespaced_pod(namespace, label_selector=f"batchmark.dev/benchmark={name}")
        .items
    )


def test_replicas_over_three_pods_sum_over_one_window_and_scale(
    batchmark_operator: InstalledOperator, jobset: JobSet, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    # 20 s each: the common window is what the pods' start skew leaves of their own, and on a loaded machine the
    # engines' pace varies over time; a longer window holds more of the same pace as each pod's own.
    apply(cluster, kube_namespace, fleet("three", 3, seconds=20))
    apply(cluster, kube_namespace, fleet("one", 1, seconds=20))
    apply(cluster, kube_namespace, fleet("pairs", 4, per_pod=2, seconds=20))
    statuses = {
        name: wait_for_phase(cluster, kube_namespace, name, {"Succeeded", "Failed"}, 240)["status"]
        for name in ("three", "one", "pairs")
    }
    for name, status in statuses.items():
        assert status["phase"] == "Succeeded", (name, status)
    # One JobSet of three Jobs of one pod each; no Job named as the benchmark.
    listed = BatchV1Api(cluster.api_client()).list_namespaced_job(kube_namespace).items
    jobs = {job.metadata.name for job in listed if job.metadata is not None}
    assert {"three-runner-0", "three-runner-1", "three-runner-2", "pairs-runner-0", "pairs-runner-1"} <= jobs
    assert "three" not in jobs
    assert statuses["three"]["jobName"] == "three"
    assert (statuses["three"]["replicas"], statuses["one"]["replicas"], statuses["pairs"]["replicas"]) == (3, 1, 4)
    [three] = statuses["three"]["results"]
    assert three["replicas"] == 3
    report = results_report(cluster, kube_namespace, "three")
    assert report is not None
    assert statuses["three"]["resultsConfigMap"].endswith("-results-merged")
    [merged] = report.benchmarks
    assert merged.replicas is not None
    assert len(merged.replicas) == 3
    assert sorted(replica.devices.split(":")[0] for replica in merged.replicas) == ["pod 0", "pod 1", "pod 2"]
    total = merged.throughput.output_tokens_per_second
    each = sum(replica.throughput.output_tokens_per_second for replica in merged.replicas)
    assert total == pytest.approx(each, rel=0.10)
    [single] = statuses["one"]["results"]
    assert three["outputTokensPerSecond"] >= 2.7 * single["outputTokensPerSecond"]
    summary = merged.replica_summary
    assert summary is not None
    assert summary.start_skew_seconds is not None
    assert summary.start_skew_seconds < 10
    # Two pods of two replicas each: four replicas, each pod's own two listed under it.
    [pairs] = statuses["pairs"]["results"]
    assert pairs["replicas"] == 4
    pairs_report = results_report(cluster, kube_namespace, "pairs")
    assert pairs_report is not None
    [pairs_merged] = pairs_report.benchmarks
    assert pairs_merged.replicas is not None
    assert sorted(replica.devices.split(":")[0] for replica in pairs_merged.replicas) == ["pod 0"] * 2 + ["pod 1"] * 2


def test_a_pod_killed_mid_run_fails_the_benchmark_naming_it_and_no_aggregate_is_claimed(
    batchmark_operator: InstalledOperator, jobset: JobSet, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, fleet("broken", 3, seconds=60))
    wait_for_phase(cluster, kube_namespace, "broken", {"Running"}, 180)
    victim = wait_for(
        "pod 1 running",
        lambda: next(
            (
                pod.metadata.name
                for pod in pods_of(cluster, kube_namespace, "broken")
                if pod.metadata.labels.get("jobset.sigs.k8s.io/job-index") == "1" and pod.status.phase == "Running"
            ),
            None,
        ),
    )
    cluster.kubectl("delete", "pod", victim, "-n", kube_namespace, "--grace-period=1", "--wait=false")
    status = wait_for_phase(cluster, kube_namespace, "broken", {"Succeeded", "Failed"}, 180)["status"]
    assert status["phase"] == "Failed", status
    # Named by its pod while the pod is there, else by its Job (a deleted pod is gone from the API).
    assert status["message"].startswith("pod 1 of 3 ("), status
    assert "broken-runner-1" in status["message"], status
    assert not status.get("results"), status  # two pods' results are not the benchmark's
    # Every pod is stopped: JobSet ends the group.
    wait_for(
        "every pod to end",
        lambda: all(pod.status.phase in ("Succeeded", "Failed") for pod in pods_of(cluster, kube_namespace, "broken")),
        120,
    )


def test_cancel_stops_every_pod_and_keeps_their_merged_partial_results(
    batchmark_operator: InstalledOperator, jobset: JobSet, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, fleet("halted", 2, seconds=120))
    wait_for(
        "progress",
        lambda: (
            ((benchmark(cluster, kube_namespace, "halted").get("status") or {}).get("progress") or {}).get(
                "requestsCompleted", 0
            )
            > 5
        ),
        180,
    )
    CustomObjectsApi(cluster.api_client()).patch_namespaced_custom_object(
        "batchmark.dev",
        "v1alpha1",
        kube_namespace,
        "batchbenchmarks",
        "halted",
        {"spec": {"cancel": True}},
        _content_type="application/merge-patch+json",
    )
    status = wait_for_phase(cluster, kube_namespace, "halted", {"Cancelled", "Failed", "Succeeded"}, 120)["status"]
    assert status["phase"] == "Cancelled", status
    [result] = status["results"]
    assert result["replicas"] == 2
    assert result["requests"]["completed"] > 0
    report = results_report(cluster, kube_namespace, "halted")
    assert report is not None
    assert report.complete is False
    # Every pod stopped: JobSet's suspended Jobs delete them, none is left running.
    wait_for("every pod gone", lambda: not pods_of(cluster, kube_namespace, "halted"), 90)


def test_kueue_admits_the_group_whole_or_not_at_all(
    batchmark_operator: InstalledOperator, jobset: JobSet, kueue: Kueue, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    objects = ClusterObjects(cluster)
    try:
        queue = gpu_queue(objects, kube_namespace, gpus=2)
        apply(cluster, kube_namespace, fleet("gang", 3, seconds=4, queueName="gpus"))
        waiting = wait_for_phase(cluster, kube_namespace, "gang", {"Queued"}, 60)["status"]
        assert waiting["phase"] == "Queued"

        # Quota for two of its three pods: none of them runs (Kueue tries again every few seconds).
        for _ in range(5):
            time.sleep(3)
            status = benchmark(cluster, kube_namespace, "gang").get("status") or {}
            assert status.get("phase") == "Queued", status
            assert not pods_of(cluster, kube_namespace, "gang")
        raised = cluster_queue(queue, objects.name("gpu"), 3)
        cluster.request(
            "PATCH",
            f"/apis/{KUEUE_API_VERSION}/clusterqueues/{queue}",
            {"spec": raised["spec"]},
            content_type="application/merge-patch+json",
        )
        status = wait_for_phase(cluster, kube_namespace, "gang", {"Succeeded", "Failed"}, 240)["status"]
        assert status["phase"] == "Succeeded", status
        assert status["results"][0]["replicas"] == 3
    finally:
        objects.delete_all()


def test_a_refused_configuration_fails_the_group_at_once_without_restarting_it(
    batchmark_operator: InstalledOperator, jobset: JobSet, kube_namespace: str
) -> None:
    """Exit 2 (a refused configuration) would be refused again: the pod's Job fails by its pod failure policy, and
    JobSet fails the group instead of restarting it (spec.retries)."""
    cluster = batchmark_operator.cluster
    CoreV1Api(cluster.api_client()).create_namespaced_config_map(
        kube_namespace, V1ConfigMap(metadata=V1ObjectMeta(name="prompts"), data={"prompts.jsonl": JSONL})
    )
    data = {"kind": "file", "path": "prompts.jsonl", "promptColumn": "question"}
    apply(cluster, kube_namespace, fleet("refused", 2, retries=1, data=data, dataVolume={"configMap": "prompts"}))
    status = wait_for_phase(cluster, kube_namespace, "refused", {"Succeeded", "Failed"}, 180)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidConfig"), status
    assert "'question'" in status["message"], status
    assert status.get("attempts", 1) == 1, status

    def failed_group() -> dict[str, Any] | None:
        group = cluster.request("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kube_namespace}/jobsets/refused")
        conditions = (group.get("status") or {}).get("conditions") or []
        failed = any(condition["type"] == "Failed" and condition["status"] == "True" for condition in conditions)
        return dict(group) if failed else None

    # The benchmark ends with its pod's exit; JobSet fails the group soon after, without a restart.
    group = wait_for("the JobSet to fail", failed_group, CLUSTER_PATIENCE_SECONDS)
    assert group["status"].get("restarts", 0) == 0, group["status"]
