"""BatchBenchmarks queued through the real Kueue (devtools/cluster/kueue.py): Kueue admits their Jobs against a
ClusterQueue's GPU quota, the operator shows the wait (phase Queued, Kueue's reason), preemption and the rest."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api

from devtools.cluster.kueue import Kueue, cluster_queue, local_queue, resource_flavor, workload_priority_class
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.refusals import assert_never_refused
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RUNNING_PHASES = {"Scheduling", "LoadingEngine", "Running"}


class ClusterObjects:
    """Cluster-scoped objects one test creates under unique names, deleted after it."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.suffix = uuid.uuid4().hex[:8]
        self.paths: list[str] = []

    def name(self, stem: str) -> str:
        return f"{stem}-{self.suffix}"

    def create(self, manifest: dict[str, Any]) -> str:
        group_version, kind = manifest["apiVersion"], manifest["kind"]
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        namespace = manifest["metadata"].get("namespace")
        collection = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        self.cluster.request("POST", collection, manifest)
        name: str = manifest["metadata"]["name"]
        if not namespace:
            self.paths.append(f"{collection}/{name}")
        return name

    def delete_all(self) -> None:
        for path in reversed(self.paths):
            try:
                self.cluster.request("DELETE", path)
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise


@pytest.fixture
def objects(batchmark_operator: InstalledOperator, kueue: Kueue) -> Iterator[ClusterObjects]:
    created = ClusterObjects(batchmark_operator.cluster)
    yield created
    created.delete_all()


def gpu_queue(objects: ClusterObjects, namespace: str, gpus: int, **queue_options: Any) -> str:
    """A ClusterQueue of `gpus` GPUs (of the test's one ResourceFlavor, so that a cohort shares it) and the
    LocalQueue `gpus` in the namespace, pointing at it."""
    flavor = objects.name("gpu")
    if not any(path.endswith(f"/resourceflavors/{flavor}") for path in objects.paths):
        objects.create(resource_flavor(flavor))
    queue = objects.create(cluster_queue(objects.name(f"gpus-{namespace}"), flavor, gpus, **queue_options))
    objects.create(local_queue(namespace, "gpus", queue))
    return queue


def queued_run(name: str, seconds: float, queue: str = "gpus", **spec: Any) -> dict[str, Any]:
    """The simulated example (one GPU), queued, running for about `seconds`."""
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["constraints"] = [{"kind": "max_duration", "seconds": seconds}]
    manifest["spec"]["profile"] = {"kind": "constant", "rate": 20}
    manifest["spec"]["queueName"] = queue
    manifest["spec"].update(spec)
    return manifest


def apply(cluster: KubeCluster, namespace: str, *manifests: dict[str, Any]) -> None:
    result = kubectl_apply(cluster, namespace, yaml.safe_dump_all(manifests))
    assert result.returncode == 0, result.stderr


def statuses(cluster: KubeCluster, namespace: str) -> dict[str, dict[str, Any]]:
    listed = cluster.request("GET", f"/apis/batchmark.dev/v1alpha1/namespaces/{namespace}/batchbenchmarks")
    return {item["metadata"]["name"]: item.get("status") or {} for item in listed["items"]}


def running_jobs(cluster: KubeCluster, namespace: str) -> int:
    """Jobs that Kueue admitted (unsuspended) and that have not finished."""
    jobs = cluster.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    done = {"Complete", "Failed"}
    return sum(
        1
        for job in jobs
        if not job["spec"].get("suspend")
        and not any(c["type"] in done and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))
    )


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(entry for entry in status.get("conditions") or [] if entry["type"] == kind)
    return found


def watch_phases(cluster: KubeCluster, namespace: str) -> subprocess.Popen[str]:
    """`kubectl get bb -w`, printing each benchmark's name and phase as they change."""
    return subprocess.Popen(
        [
            *(str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, "get", "bb"),
            *("-w", "-o", "jsonpath={.metadata.name} {.status.phase}{'\\n'}"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def phase_histories(output: str) -> dict[str, list[str]]:
    histories: dict[str, list[str]] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        history = histories.setdefault(parts[0], [])
        if not history or history[-1] != parts[1]:
            history.append(parts[1])
    return histories


def test_ten_one_gpu_benchmarks_share_a_queue_of_four_gpus(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=4)
    watcher = watch_phases(cluster, kube_namespace)
    names = [f"sweep-{index}" for index in range(10)]
    try:
        time.sleep(1)
        apply(cluster, kube_namespace, *(queued_run(name, seconds=3) for name in names))
        most_at_once, waiting_reasons = 0, set()
        deadline = time.monotonic() + 300
        while True:
            most_at_once = max(most_at_once, running_jobs(cluster, kube_namespace))
            current = statuses(cluster, kube_namespace)
            waiting_reasons |= {s.get("message", "") for s in current.values() if s.get("phase") == "Queued"}
            if all(current.get(name, {}).get("phase") == "Succeeded" for name in names):
                break
            failed = {name: s for name, s in current.items() if s.get("phase") in ("Failed", "Cancelled")}
            assert not failed, failed
            assert time.monotonic() < deadline, {name: s.get("phase") for name, s in current.items()}
            time.sleep(0.2)
        time.sleep(1)
    finally:
        watcher.terminate()
        output, _ = watcher.communicate(timeout=10)

    assert most_at_once == 4
    assert any("insufficient unused quota for nvidia.com/gpu" in reason for reason in waiting_reasons), waiting_reasons
    histories = phase_histories(output)
    for name in names:
        history = [phase for phase in histories[name] if phase != "Pending"]
        assert history[0] == "Queued", (name, history)
        assert history[-1] == "Succeeded", (name, history)
        assert "Scheduling" in history or "LoadingEngine" in history or "Running" in history, (name, history)
    for status in statuses(cluster, kube_namespace).values():
        assert condition(status, "Admitted")["status"] == "True"
        assert condition(status, "Preempted")["status"] == "False"
        assert status["attempts"] == 1
        assert status["results"]


def test_a_missing_local_queue_fails_with_the_reason(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, queued_run("lost", seconds=1, queue="no-such-queue"))
    status = wait_for_phase(cluster, kube_namespace, "lost", {"Failed"})["status"]
    assert status["reason"] == "LocalQueueNotFound"
    assert "no-such-queue" in status["message"]
    assert kube_namespace in status["message"]
    jobs = cluster.request("GET", f"/apis/batch/v1/namespaces/{kube_namespace}/jobs")["items"]
    assert jobs == []


def test_a_higher_priority_benchmark_preempts_a_lower_one_which_reruns_and_keeps_its_results(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1, preemption={"withinClusterQueue": "LowerPriority"})
    priorities = {}
    for stem, value in (("low", 100), ("high", 1000)):
        # The pod's PriorityClass and Kueue's WorkloadPriorityClass share the name, as clusters set them up.
        name = objects.name(stem)
        objects.create(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )
        objects.create(workload_priority_class(name, value))
        priorities[stem] = name

    apply(cluster, kube_namespace, queued_run("sweep", seconds=12, priorityClassName=priorities["low"]))
    wait_for_phase(cluster, kube_namespace, "sweep", {"Running"}, timeout_seconds=120)
    time.sleep(2)  # some requests done: results to keep
    apply(cluster, kube_namespace, queued_run("urgent", seconds=4, priorityClassName=priorities["high"]))

    preempted = wait_for(
        "the sweep to be preempted",
        lambda: (s := benchmark(cluster, kube_namespace, "sweep")["status"]).get("preemptions") and s,
    )
    assert preempted["preemptions"][0]["reason"] == "InClusterQueue"
    assert preempted["preemptions"][0]["attempt"] == 1
    assert condition(preempted, "Preempted")["status"] == "True"

    urgent = wait_for_phase(cluster, kube_namespace, "urgent", {"Succeeded"}, timeout_seconds=180)["status"]
    assert urgent["attempts"] == 1
    sweep = wait_for_phase(cluster, kube_namespace, "sweep", {"Succeeded"}, timeout_seconds=240)["status"]
    assert sweep["attempts"] == 2
    assert sweep["results"]
    record = sweep["preemptions"][0]
    assert record["results"], record  # the preempted attempt's partial results, kept
    assert record["results"][0]["stopReason"] != sweep["results"][0]["stopReason"] or record["runId"] != sweep["runId"]
    events = CoreV1Api(cluster.api_client()).list_namespaced_event(
        kube_namespace, field_selector="involvedObject.name=sweep"
    )
    reasons = [event.reason for event in events.items]
    assert "Preempted" in reasons
    assert reasons.count("Queued") >= 2  # queued, preempted back into the queue


def test_two_teams_sharing_a_cohort_each_get_their_nominal_share(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    cohort = objects.name("lab")
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    other = f"{kube_namespace}-b"
    cluster.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    try:
        gpu_queue(objects, kube_namespace, gpus=2, cohort=cohort, preemption=reclaim)
        gpu_queue(objects, other, gpus=2, cohort=cohort, preemption=reclaim)
        # Team A alone borrows team B's idle quota: four at once.
        apply(cluster, kube_namespace, *(queued_run(f"a-{index}", seconds=15) for index in range(4)))
        wait_for("team A to run four", lambda: running_jobs(cluster, kube_namespace) == 4, timeout_seconds=120)
        # Team B arrives and reclaims its nominal two GPUs.
        apply(cluster, other, *(queued_run(f"b-{index}", seconds=3) for index in range(2)))
        shares = wait_for(
            "two GPUs for each team",
            lambda: (
                (running_jobs(cluster, kube_namespace), running_jobs(cluster, other))
                if (running_jobs(cluster, kube_namespace), running_jobs(cluster, other)) == (2, 2)
                else None
            ),
            timeout_seconds=120,
        )
        assert shares == (2, 2)
        for namespace, names in ((kube_namespace, [f"a-{i}" for i in range(4)]), (other, ["b-0", "b-1"])):
            for name in names:
                wait_for_phase(cluster, namespace, name, {"Succeeded"}, timeout_seconds=240)
        team_a = statuses(cluster, kube_namespace)
        reclaimed = [s for s in team_a.values() if s.get("preemptions")]
        assert len(reclaimed) == 2
        assert all(s["preemptions"][0]["reason"] == "InCohortReclamation" for s in reclaimed)
        assert all(s["attempts"] == 2 for s in reclaimed)
    finally:
        cluster.request("DELETE", f"/api/v1/namespaces/{other}")


def test_cancelling_a_queued_benchmark_keeps_kueue_from_restarting_it(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1)
    apply(cluster, kube_namespace, queued_run("long", seconds=120))
    wait_for(
        "progress",
        lambda: (
            ((benchmark(cluster, kube_namespace, "long").get("status") or {}).get("progress") or {}).get(
                "requestsCompleted", 0
            )
            > 5
        ),
        timeout_seconds=120,
    )
    cluster.request(
        "PATCH",
        f"/apis/batchmark.dev/v1alpha1/namespaces/{kube_namespace}/batchbenchmarks/long",
        {"spec": {"cancel": True}},
        "application/merge-patch+json",
    )
    status = wait_for_phase(cluster, kube_namespace, "long", {"Cancelled", "Failed", "Succeeded"}, 90)["status"]
    assert status["phase"] == "Cancelled", status
    # The cancelled run's results: no second pod started (and was stopped while loading) to write over them.
    assert status["results"], status
    assert status["results"][0]["requests"]["completed"] > 0, status
    # Kueue would unsuspend a Job it admitted; its Workload is deactivated, so the Job stays stopped.
    time.sleep(5)
    job = cluster.request("GET", f"/apis/batch/v1/namespaces/{kube_namespace}/jobs/long")
    assert job["spec"]["suspend"] is True
    workloads = cluster.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{kube_namespace}/workloads")
    assert [workload["spec"]["active"] for workload in workloads["items"]] == [False]
    assert running_jobs(cluster, kube_namespace) == 0


def queue_positions(cluster: KubeCluster, namespace: str) -> dict[str, dict[str, Any]]:
    """status.queue of each Queued benchmark that shows one."""
    return {
        name: status["queue"]
        for name, status in statuses(cluster, namespace).items()
        if status.get("phase") == "Queued" and status.get("queue")
    }


def test_queued_benchmarks_show_their_positions_as_the_queue_drains(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1)
    names = [f"turn-{index}" for index in range(4)]
    # One at a time, so that Kueue's order (creation, to the second) is theirs.
    for name in names:
        apply(cluster, kube_namespace, queued_run(name, seconds=10))
        time.sleep(1.1)

    def positions_become(expected: dict[str, int]) -> dict[str, dict[str, Any]]:
        def probe() -> dict[str, dict[str, Any]] | None:
            found = queue_positions(cluster, kube_namespace)
            return found if {name: entry["position"] for name, entry in found.items()} == expected else None

        return wait_for(f"the positions {expected}", probe, timeout_seconds=90)

    # turn-0 runs; the other three wait behind it, at 0, 1 and 2, in the order they came.
    three = positions_become({"turn-1": 0, "turn-2": 1, "turn-3": 2})
    assert all(entry["name"] == "gpus" for entry in three.values())
    assert all(entry["clusterQueuePosition"] == entry["position"] for entry in three.values())
    last = benchmark(cluster, kube_namespace, "turn-3")["status"]
    assert last["message"].startswith("position 2 in LocalQueue gpus, 2 in its ClusterQueue"), last["message"]
    assert "insufficient unused quota for nvidia.com/gpu" in last["message"]
    assert condition(last, "Admitted")["message"] == last["message"]

    # turn-1 is admitted: it shows none, and the two behind it move up.
    positions_become({"turn-2": 0, "turn-3": 1})
    assert "queue" not in benchmark(cluster, kube_namespace, "turn-1")["status"]
    positions_become({"turn-3": 0})
    for name in names:
        wait_for_phase(cluster, kube_namespace, name, {"Succeeded"}, timeout_seconds=180)
    for name, status in statuses(cluster, kube_namespace).items():
        assert "queue" not in status, (name, status)
        assert status["results"]


def test_without_kueues_visibility_api_queued_benchmarks_run_without_positions(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kueue: Kueue, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1)
    mark = batchmark_operator.log_mark()
    kueue.unregister_visibility_api()
    try:
        apply(cluster, kube_namespace, *(queued_run(f"blind-{index}", seconds=3) for index in range(3)))
        waiting = wait_for(
            "two Queued behind the first",
            lambda: (
                found
                if len(
                    found := {n: s for n, s in statuses(cluster, kube_namespace).items() if s.get("phase") == "Queued"}
                )
                == 2
                else None
            ),
            timeout_seconds=60,
        )
        time.sleep(12)  # two polls at least
        for name in [f"blind-{index}" for index in range(3)]:
            wait_for_phase(cluster, kube_namespace, name, {"Succeeded"}, timeout_seconds=180)
    finally:
        kueue.register_visibility_api(time.monotonic() + 60)
    assert all("queue" not in status for status in waiting.values())
    assert all(not status["message"].startswith("position") for status in waiting.values())
    for status in statuses(cluster, kube_namespace).values():
        assert "queue" not in status
    batchmark_operator.assert_alive()
    new_log = batchmark_operator.log_since(mark)
    # Its own queue's: a benchmark an earlier test left queued elsewhere is warned about too.
    warnings = [line for line in new_log.splitlines() if f"queue positions of LocalQueue {kube_namespace}/" in line]
    assert len(warnings) == 1, warnings
    assert f"{kube_namespace}/gpus" in warnings[0]
    assert "HTTP 404" in warnings[0] or "HTTP 503" in warnings[0], warnings[0]


def test_with_exactly_its_documented_rbac_the_operator_reads_queue_positions(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str, tmp_path: Path
) -> None:
    """The visibility server authorizes each proxied request with a SubjectAccessReview of the operator's own
    user: the operator's rules (rbac.py, the chart's) must grant it, and nothing more is needed."""
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=1)
    # The session's operator runs as the chart's ServiceAccount, bound to exactly those rules.
    restricted = batchmark_operator
    mark = restricted.log_mark()
    apply(cluster, kube_namespace, queued_run("ahead", seconds=15))
    time.sleep(1.1)
    apply(cluster, kube_namespace, queued_run("behind", seconds=2))
    shown = wait_for(
        "the position of the one behind",
        lambda: queue_positions(cluster, kube_namespace).get("behind"),
        timeout_seconds=60,
    )
    assert shown == {"name": "gpus", "position": 0, "clusterQueuePosition": 0}
    wait_for_phase(cluster, kube_namespace, "behind", {"Succeeded"}, timeout_seconds=180)
    restricted.assert_alive()
    log = restricted.log_since(mark)
    assert_never_refused(log)
    assert "queue positions of LocalQueue" not in log
