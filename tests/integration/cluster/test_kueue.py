"""The real Kueue, run by devtools/cluster/kueue.py, admits suspended Jobs against ClusterQueue quotas on the
local control plane, and its kubelets run them once admitted: the ground the operator's queueing stands on."""

from __future__ import annotations

import functools
import json
import time
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster import images
from devtools.cluster.controlplane import GPU_TOLERATION
from devtools.cluster.kueue import (
    KUEUE_API_VERSION,
    QUEUE_NAME_LABEL,
    VISIBILITY_GROUP,
    VISIBILITY_VERSIONS,
    Kueue,
    cluster_queue,
    local_queue,
    resource_flavor,
    workload_priority_class,
)
from tests.cluster_fixtures import KubeCluster
from tests.polling import CLUSTER_PATIENCE_SECONDS, wait_for

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def api_path(manifest: dict[str, Any]) -> str:
    """The collection a manifest of Kueue or batch/v1 is created in."""
    group_version = manifest["apiVersion"]
    plural = manifest["kind"].lower() + ("es" if manifest["kind"].endswith("s") else "s")
    namespace = manifest["metadata"].get("namespace")
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group_version}{scope}/{plural}"


def gpu_job(namespace: str, name: str, queue: str, seconds: float, priority_class: str | None = None) -> dict[str, Any]:
    """A one-GPU Job as the operator creates a queued benchmark's: suspended, labelled with its LocalQueue."""
    labels = {QUEUE_NAME_LABEL: queue}
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    container = {
        "name": "main",
        "image": images.TAGS["runner"],
        "command": ["sleep", str(seconds)],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                }
            },
        },
    }


class Queues:
    """Creates Kueue objects for one test with unique names, and deletes the cluster-scoped ones after it."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.suffix = uuid.uuid4().hex[:8]
        self.created: list[str] = []

    def name(self, stem: str) -> str:
        return f"{stem}-{self.suffix}"

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        collection = api_path(manifest)
        created: dict[str, Any] = self.cluster.request("POST", collection, manifest)
        if "namespace" not in manifest["metadata"]:
            self.created.append(f"{collection}/{manifest['metadata']['name']}")
        return created

    def delete_all(self) -> None:
        for path in reversed(self.created):
            try:
                self.cluster.request("DELETE", path)
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise

    def get(self, path: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.cluster.request("GET", path)
        return answer


@pytest.fixture
def queues(kube_cluster: KubeCluster, kueue: Kueue) -> Iterator[Queues]:
    objects = Queues(kube_cluster)
    yield objects
    objects.delete_all()


def jobs(queues: Queues, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = queues.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return items


def finished(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions)


def succeeded(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def unsuspended(job: dict[str, Any]) -> bool:
    return not job["spec"].get("suspend", False)


def workloads(queues: Queues, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = queues.get(f"/apis/{KUEUE_API_VERSION}/namespaces/{namespace}/workloads")["items"]
    return items


def condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in workload.get("status", {}).get("conditions", []):
        if entry["type"] == kind:
            found: dict[str, Any] = entry
            return found
    return None


def workload_of(queues: Queues, namespace: str, job_name: str) -> dict[str, Any] | None:
    for workload in workloads(queues, namespace):
        if any(owner["name"] == job_name for owner in workload["metadata"].get("ownerReferences", [])):
            return workload
    return None


def run_until_all_finish(
    queues: Queues, namespace: str, count: int, timeout_seconds: float = CLUSTER_PATIENCE_SECONDS
) -> int:
    """Watch the namespace's Jobs until `count` have finished; return the most that ran at once. (Kueue admits
    them and the kubelets run them one quota's worth at a time: the act is asserted, not its speed.)"""
    most_at_once = 0
    deadline = time.monotonic() + timeout_seconds
    while True:
        current = jobs(queues, namespace)
        running = [job for job in current if unsuspended(job) and not finished(job)]
        most_at_once = max(most_at_once, len(running))
        if len([job for job in current if finished(job)]) == count:
            return most_at_once
        if time.monotonic() > deadline:
            raise AssertionError(f"not all {count} Jobs finished in {timeout_seconds} s")
        time.sleep(0.1)


def test_a_cluster_queue_admits_no_more_gpus_than_its_quota(queues: Queues, kube_namespace: str) -> None:
    flavor = queues.create(resource_flavor(queues.name("gpu")))["metadata"]["name"]
    cluster = queues.create(cluster_queue(queues.name("two-gpus"), flavor, gpus=2))["metadata"]["name"]
    queues.create(local_queue(kube_namespace, "team", cluster))
    for index in range(5):
        queues.create(gpu_job(kube_namespace, f"job-{index}", "team", seconds=2))

    pending = wait_for(
        "a Workload that waits for quota",
        lambda: next(
            (
                workload
                for workload in workloads(queues, kube_namespace)
                if (reserved := condition(workload, "QuotaReserved")) is not None and reserved["status"] == "False"
            ),
            None,
        ),
    )
    message = condition(pending, "QuotaReserved") or {}
    assert "insufficient unused quota for nvidia.com/gpu" in message.get("message", ""), message

    most_at_once = run_until_all_finish(queues, kube_namespace, count=5)
    assert most_at_once == 2
    assert all(succeeded(job) for job in jobs(queues, kube_namespace))
    assert all(condition(workload, "Finished") for workload in workloads(queues, kube_namespace))


def test_a_job_naming_a_missing_local_queue_waits_with_the_reason(queues: Queues, kube_namespace: str) -> None:
    queues.create(gpu_job(kube_namespace, "lost", "no-such-queue", seconds=1))

    def inadmissible() -> dict[str, Any] | None:
        workload = workload_of(queues, kube_namespace, "lost")
        reserved = condition(workload, "QuotaReserved") if workload else None
        return reserved if reserved is not None and reserved.get("reason") == "Inadmissible" else None

    reason = wait_for("the Workload's Inadmissible condition", inadmissible)
    assert "no-such-queue" in reason["message"], reason
    assert "doesn't exist" in reason["message"], reason
    job = queues.get(f"/apis/batch/v1/namespaces/{kube_namespace}/jobs/lost")
    assert job["spec"]["suspend"] is True


def test_a_higher_priority_job_preempts_a_lower_one_which_requeues_and_finishes(
    queues: Queues, kube_namespace: str
) -> None:
    flavor = queues.create(resource_flavor(queues.name("gpu")))["metadata"]["name"]
    preemption = {"withinClusterQueue": "LowerPriority"}
    cluster = queues.create(cluster_queue(queues.name("one-gpu"), flavor, gpus=1, preemption=preemption))
    queues.create(local_queue(kube_namespace, "team", cluster["metadata"]["name"]))
    low = queues.create(workload_priority_class(queues.name("low"), 100))["metadata"]["name"]
    high = queues.create(workload_priority_class(queues.name("high"), 1000))["metadata"]["name"]

    queues.create(gpu_job(kube_namespace, "sweep", "team", seconds=6, priority_class=low))
    wait_for(
        "the low-priority Job to run",
        lambda: (
            (job := queues.get(f"/apis/batch/v1/namespaces/{kube_namespace}/jobs/sweep"))
            and job.get("status", {}).get("active", 0) == 1
        ),
    )
    queues.create(gpu_job(kube_namespace, "urgent", "team", seconds=2, priority_class=high))

    def preempted() -> dict[str, Any] | None:
        workload = workload_of(queues, kube_namespace, "sweep")
        found = condition(workload, "Preempted") if workload else None
        return found if found is not None and found["status"] == "True" else None

    reason = wait_for("the low-priority Workload to be preempted", preempted)
    assert reason["reason"] == "InClusterQueue", reason

    assert run_until_all_finish(queues, kube_namespace, count=2) == 1
    assert all(succeeded(job) for job in jobs(queues, kube_namespace))
    sweep = workload_of(queues, kube_namespace, "sweep")
    assert sweep is not None
    # Kueue counts the Workload's evictions by reason.
    evictions = sweep["status"]["schedulingStats"]["evictions"]
    assert [(entry["reason"], entry["count"]) for entry in evictions] == [("Preempted", 1)]


def test_cluster_queues_sharing_a_cohort_reclaim_their_nominal_share(
    queues: Queues, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    flavor = queues.create(resource_flavor(queues.name("gpu")))["metadata"]["name"]
    cohort = queues.name("lab")
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    team_a = queues.create(cluster_queue(queues.name("team-a"), flavor, gpus=2, cohort=cohort, preemption=reclaim))
    team_b = queues.create(cluster_queue(queues.name("team-b"), flavor, gpus=2, cohort=cohort, preemption=reclaim))
    other_namespace = f"{kube_namespace}-b"
    kube_cluster.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other_namespace}}
    )
    try:
        queues.create(local_queue(kube_namespace, "team", team_a["metadata"]["name"]))
        queues.create(local_queue(other_namespace, "team", team_b["metadata"]["name"]))
        # Team A alone borrows team B's idle quota: all 4 GPUs.
        for index in range(4):
            queues.create(gpu_job(kube_namespace, f"a-{index}", "team", seconds=20))
        wait_for(
            "team A to borrow the whole cohort",
            lambda: len([job for job in jobs(queues, kube_namespace) if unsuspended(job)]) == 4,
        )
        # Team B arrives and reclaims its nominal 2 GPUs from team A's borrowed ones.
        for index in range(4):
            queues.create(gpu_job(other_namespace, f"b-{index}", "team", seconds=2))

        def shares() -> tuple[int, int] | None:
            a = len([job for job in jobs(queues, kube_namespace) if unsuspended(job) and not finished(job)])
            b = len([job for job in jobs(queues, other_namespace) if unsuspended(job) and not finished(job)])
            return (a, b) if (a, b) == (2, 2) else None

        held = wait_for("each team to hold its nominal 2 GPUs", shares, timeout_seconds=CLUSTER_PATIENCE_SECONDS)
        assert held == (2, 2)
        evicted = [
            workload
            for workload in workloads(queues, kube_namespace)
            if (found := condition(workload, "Preempted")) is not None and found["reason"] == "InCohortReclamation"
        ]
        assert len(evicted) == 2
    finally:
        kube_cluster.request("DELETE", f"/api/v1/namespaces/{other_namespace}")


def test_the_example_queues_admit_a_gpu_job(queues: Queues, kube_namespace: str) -> None:
    documents = [
        document for document in yaml.safe_load_all((EXAMPLES / "kueue" / "queues.yaml").read_text()) if document
    ]
    kinds = [document["kind"] for document in documents]
    assert kinds == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    for document in documents:
        if document["kind"] == "LocalQueue":
            document["metadata"]["namespace"] = kube_namespace
            queue = document["metadata"]["name"]
        else:
            # Cluster-scoped: renamed so a run never meets another test's (or a person's) queues.
            document["metadata"]["name"] = queues.name(document["metadata"]["name"])
    flavor, cluster, local = documents
    cluster["spec"]["resourceGroups"][0]["flavors"][0]["name"] = flavor["metadata"]["name"]
    local["spec"]["clusterQueue"] = cluster["metadata"]["name"]
    for document in documents:
        queues.create(document)

    queues.create(gpu_job(kube_namespace, "one", queue, seconds=1))
    run_until_all_finish(queues, kube_namespace, count=1)
    assert all(succeeded(job) for job in jobs(queues, kube_namespace))


def pending_workloads(kube_cluster: KubeCluster, path: str) -> list[dict[str, Any]]:
    """`kubectl get --raw` of a visibility API path: served by Kueue's visibility server, through the API server's
    aggregation layer."""
    answer = kube_cluster.kubectl("get", "--raw", f"/apis/{VISIBILITY_GROUP}/v1beta2/{path}/pendingworkloads")
    summary = json.loads(answer.stdout)
    assert summary["kind"] == "PendingWorkloadsSummary", summary
    items: list[dict[str, Any]] = summary["items"]
    return items


def owner_names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["ownerReferences"][0]["name"] for item in items]


def test_kueue_reports_queue_positions_through_the_api_server(
    queues: Queues, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    for version in VISIBILITY_VERSIONS:
        service = queues.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{version}.{VISIBILITY_GROUP}")
        available = next(entry for entry in service["status"]["conditions"] if entry["type"] == "Available")
        assert available["status"] == "True", available
    flavor = queues.create(resource_flavor(queues.name("gpu")))["metadata"]["name"]
    cluster = queues.create(cluster_queue(queues.name("one-gpu"), flavor, gpus=1))["metadata"]["name"]
    queues.create(local_queue(kube_namespace, "team", cluster))
    queues.create(local_queue(kube_namespace, "other", cluster))
    # Holds the one GPU while the others queue behind it.
    queues.create(gpu_job(kube_namespace, "first", "team", seconds=30))
    wait_for(
        "the first Job to be admitted",
        lambda: unsuspended(queues.get(f"/apis/batch/v1/namespaces/{kube_namespace}/jobs/first")),
    )

    def pending(job_name: str) -> bool:
        return job_name in owner_names(pending_workloads(kube_cluster, f"clusterqueues/{cluster}"))

    # One at a time, so that Kueue's order (priority, then creation) is the order they were made in.
    for index, queue in enumerate(("team", "other", "team", "team")):
        queues.create(gpu_job(kube_namespace, f"wait-{index}", queue, seconds=3))
        wait_for(f"wait-{index} to be pending", functools.partial(pending, f"wait-{index}"))
        time.sleep(1.1)  # creation timestamps have whole seconds

    in_team = pending_workloads(kube_cluster, f"namespaces/{kube_namespace}/localqueues/team")
    assert owner_names(in_team) == ["wait-0", "wait-2", "wait-3"]
    assert [item["positionInLocalQueue"] for item in in_team] == [0, 1, 2]
    assert [item["positionInClusterQueue"] for item in in_team] == [0, 2, 3]
    in_other = pending_workloads(kube_cluster, f"namespaces/{kube_namespace}/localqueues/other")
    assert [(item["positionInLocalQueue"], item["positionInClusterQueue"]) for item in in_other] == [(0, 1)]
    in_cluster_queue = pending_workloads(kube_cluster, f"clusterqueues/{cluster}")
    assert owner_names(in_cluster_queue) == ["wait-0", "wait-1", "wait-2", "wait-3"]

    # As the queue drains, the ones behind move up.
    wait_for(
        "wait-0 to be admitted",
        lambda: (
            owner_names(pending_workloads(kube_cluster, f"namespaces/{kube_namespace}/localqueues/team"))
            == ["wait-2", "wait-3"]
        ),
        timeout_seconds=CLUSTER_PATIENCE_SECONDS,
    )
    in_team = pending_workloads(kube_cluster, f"namespaces/{kube_namespace}/localqueues/team")
    assert [item["positionInLocalQueue"] for item in in_team] == [0, 1]
    assert [item["positionInClusterQueue"] for item in in_team] == [1, 2]
    run_until_all_finish(queues, kube_namespace, count=5)
    assert pending_workloads(kube_cluster, f"namespaces/{kube_namespace}/localqueues/team") == []
