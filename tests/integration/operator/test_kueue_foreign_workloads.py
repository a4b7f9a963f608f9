"""The operator and the Workloads of other teams on the same real Kueue (devtools/cluster/kueue.py): it follows only
those of its own benchmarks' Jobs. Another team's plain Jobs, queued by Kueue in the same ClusterQueue, one of
them named as a benchmark and labelled as benchmark Jobs are, are never patched, never given an event or a
metric series by the operator, and never move a benchmark; the benchmarks still get their queue positions,
counted among everyone's, and a cancel deactivates the benchmark's own Workload only."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from batchmark.operator.controller.kube import COMPONENT
from batchmark.operator.resource.api import DEFAULT_IMAGE
from devtools.cluster.controlplane import GPU_TOLERATION
from devtools.cluster.kueue import Kueue, local_queue
from tests.cluster_fixtures import KubeCluster, fresh_namespace
from tests.integration.operator.conftest import benchmark, wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.test_kueue_queueing import ClusterObjects, apply, gpu_queue, queued_run
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# What the operator's index of Jobs selects benchmark Jobs by: a copy of a benchmark Job's labels.
BENCHMARK_JOB_LABELS = {"app.kubernetes.io/name": "batchmark", "app.kubernetes.io/component": "benchmark"}


@pytest.fixture
def queues(batchmark_operator: InstalledOperator, kueue: Kueue) -> Iterator[ClusterObjects]:
    """The test's cluster-scoped Kueue objects, deleted after it."""
    created = ClusterObjects(batchmark_operator.cluster)
    yield created
    created.delete_all()


@pytest.fixture
def other_team(kube_cluster: KubeCluster) -> Iterator[str]:
    """The namespace of a team that runs its own Jobs through Kueue, without batchmark."""
    yield from fresh_namespace(kube_cluster)


def team_job(name: str, seconds: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A plain one-GPU Job of the other team, queued by Kueue: suspended, naming the team's LocalQueue."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "training", **(labels or {})}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "train",
                            "image": DEFAULT_IMAGE,
                            "command": ["sleep", str(seconds)],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def workload_of(cluster: KubeCluster, namespace: str, job_name: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job, found by its owner reference."""
    workloads = cluster.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads")["items"]
    for workload in workloads:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(owner["kind"] == "Job" and owner["name"] == job_name for owner in owners):
            found: dict[str, Any] = workload
            return found
    return None


def managers(body: dict[str, Any]) -> set[str]:
    return {entry["manager"] for entry in body["metadata"].get("managedFields") or []}


def marks_of_the_operator(body: dict[str, Any]) -> list[str]:
    """Annotations and finalizers kopf or the operator would leave on an object it handled as its own."""
    metadata = body["metadata"]
    keys = [*(metadata.get("annotations") or {}), *(metadata.get("finalizers") or [])]
    return [key for key in keys if "batchmark.dev" in key or "kopf.zalando.org" in key]


def test_the_operator_never_touches_another_teams_workloads_and_counts_them_in_positions(
    batchmark_operator: InstalledOperator, queues: ClusterObjects, kube_namespace: str, other_team: str
) -> None:
    cluster, ours, theirs = batchmark_operator.cluster, kube_namespace, other_team
    mark = batchmark_operator.log_mark()
    # One GPU, one ClusterQueue, both teams' LocalQueues in it.
    cluster_queue = gpu_queue(queues, ours, gpus=1)
    queues.create(local_queue(theirs, "training", cluster_queue))

    # Their first Job takes the GPU; their second, named as our benchmark and labelled as a benchmark Job, waits
    # first in the ClusterQueue.
    cluster.request("POST", f"/apis/batch/v1/namespaces/{theirs}/jobs", team_job("train", 25))
    wait_for(
        "their first Job to be admitted",
        lambda: not cluster.request("GET", f"/apis/batch/v1/namespaces/{theirs}/jobs/train")["spec"]["suspend"],
        60,
    )
    cluster.request("POST", f"/apis/batch/v1/namespaces/{theirs}/jobs", team_job("bench", 3, BENCHMARK_JOB_LABELS))
    wait_for("their namesake's Workload", lambda: workload_of(cluster, theirs, "bench"), 30)
    # Kueue orders a queue by creation time, to the second: each comes a second after the one before.
    time.sleep(1.1)

    # Ours: `bench` (to be cancelled while it waits) and `after` (to run once everything ahead has).
    apply(cluster, ours, queued_run("bench", seconds=3))
    wait_for("our bench's Workload", lambda: workload_of(cluster, ours, "bench"), 30)
    time.sleep(1.1)
    apply(cluster, ours, queued_run("after", seconds=3))

    def queue_of(name: str, expected: tuple[int, int]) -> dict[str, Any] | None:
        queue: dict[str, Any] | None = (benchmark(cluster, ours, name).get("status") or {}).get("queue")
        return queue if queue and (queue["position"], queue["clusterQueuePosition"]) == expected else None

    # In our LocalQueue they are first and second; in the ClusterQueue, behind their waiting Job.
    try:
        assert wait_for("bench's position", lambda: queue_of("bench", (0, 1)), 90)["name"] == "gpus"
    except AssertionError:
        statuses = {name: benchmark(cluster, ours, name).get("status") for name in ("bench", "after")}
        raise AssertionError(f"bench never at (0, 1): {json.dumps(statuses, indent=1)}") from None
    wait_for("after's position", lambda: queue_of("after", (1, 2)), 90)
    message = benchmark(cluster, ours, "bench")["status"]["message"]
    assert message.startswith("position 0 in LocalQueue gpus, 1 in its ClusterQueue"), message

    # Cancelling our waiting `bench` deactivates our Workload, not theirs of the same Job name.
    cluster.request(
        "PATCH",
        f"/apis/batchmark.dev/v1alpha1/namespaces/{ours}/batchbenchmarks/bench",
        {"spec": {"cancel": True}},
        "application/merge-patch+json",
    )
    wait_for_phase(cluster, ours, "bench", {"Cancelled"}, timeout_seconds=60)
    wait_for(
        "our Workload deactivated",
        lambda: (workload_of(cluster, ours, "bench") or {"spec": {}})["spec"].get("active") is False,
        30,
    )

    # Their Jobs run in Kueue's order, then ours.
    after = wait_for_phase(cluster, ours, "after", {"Succeeded", "Failed"}, timeout_seconds=180)["status"]
    assert after["phase"] == "Succeeded", after
    assert after["results"], after
    assert after["attempts"] == 1, after
    assert not after.get("preemptions"), after
    for name in ("train", "bench"):
        job = cluster.request("GET", f"/apis/batch/v1/namespaces/{theirs}/jobs/{name}")
        done = {c["type"] for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"}
        assert "Complete" in done, (name, job.get("status"))

    assert_no_write_of_the_operator_on_theirs(cluster, ours, theirs)

    # No event from the operator about anything of theirs, and none of ours names them.
    their_events = cluster.request("GET", f"/api/v1/namespaces/{theirs}/events")["items"]
    from_the_operator = [
        event
        for event in their_events
        if COMPONENT in (event.get("reportingComponent"), (event.get("source") or {}).get("component"))
    ]
    assert not from_the_operator, json.dumps(from_the_operator, indent=1)
    for event in cluster.request("GET", f"/api/v1/namespaces/{ours}/events")["items"]:
        assert theirs not in json.dumps(event), event

    # No metric series, no benchmark, no log line about them.
    assert theirs not in batchmark_operator.metrics()
    assert not cluster.request("GET", f"/apis/batchmark.dev/v1alpha1/namespaces/{theirs}/batchbenchmarks")["items"]
    batchmark_operator.assert_alive()
    new_log = batchmark_operator.log_since(mark)
    assert theirs not in new_log, [line for line in new_log.splitlines() if theirs in line]


def assert_no_write_of_the_operator_on_theirs(cluster: KubeCluster, ours: str, theirs: str) -> None:
    # Nothing of theirs carries a write of the operator: not its field manager (seen on our Job, which it
    # created), not kopf's or batchmark's annotations or finalizers; their Workloads stayed active.
    ours_only = managers(cluster.request("GET", f"/apis/batch/v1/namespaces/{ours}/jobs/after")) - managers(
        cluster.request("GET", f"/apis/batch/v1/namespaces/{theirs}/jobs/train")
    )
    assert ours_only, "the operator's field manager is not told apart from the test's"
    for name in ("train", "bench"):
        job = cluster.request("GET", f"/apis/batch/v1/namespaces/{theirs}/jobs/{name}")
        workload = workload_of(cluster, theirs, name)
        assert workload is not None
        for body in (job, workload):
            assert not marks_of_the_operator(body), body["metadata"]
            assert not managers(body) & ours_only, (name, managers(body), ours_only)
        assert workload["spec"].get("active", True) is True, workload["spec"]
