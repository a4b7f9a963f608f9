"""The real JobSet controller, run by devtools/cluster/jobset.py, runs a group of Jobs as one on the local control
plane's kubelets: pods with stable hostnames under a headless Service, which find each other by those names through
the cluster DNS, completion as one, deletion as one; and the real Kueue admits a JobSet whole or not at all. The
ground a benchmark spanning several pods will stand on."""

from __future__ import annotations

import json
import time
import urllib.error
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.cluster import images
from devtools.cluster.controlplane import GPU_TOLERATION
from devtools.cluster.jobset import (
    COORDINATOR_LABEL,
    JOBSET_API_VERSION,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_NAME_LABEL,
    JobSet,
    pod_hostname,
    replicated_job,
)
from devtools.cluster.jobset import jobset as jobset_manifest
from devtools.cluster.kueue import (
    KUEUE_API_VERSION,
    QUEUE_NAME_LABEL,
    Kueue,
    cluster_queue,
    local_queue,
    resource_flavor,
)
from tests.cluster_fixtures import KubeCluster
from tests.polling import CLUSTER_PATIENCE_SECONDS, wait_for

pytestmark = pytest.mark.cluster

# What each pod does, as a group of workers meeting before they work together would: it listens on RENDEZVOUS_PORT,
# resolves each of its peers' stable names (PEERS, short: `<hostname>.<subdomain>`, found through the search domain
# `<namespace>.svc.cluster.local` of its resolv.conf) as soon as it starts, retrying while the name is not there yet
# (a peer without an address yet), connects to each and says its hostname, and waits until every peer has said
# theirs (so none ends, and leaves the Service's endpoints, before all have found it). Then it reports on its
# standard output, as JSON: its hostname and address, the fully qualified name its resolver gives it (the kubelet
# writes `<hostname>.<subdomain>.<namespace>.svc.cluster.local` into its /etc/hosts), the coordinator's name, what
# each peer's name resolved to and after how many seconds (or the error at the deadline), and whom it heard from.
RENDEZVOUS_PORT = 7000
REPORT = f"""
import json, os, socket, threading, time
me = socket.gethostname()
peers = [name for name in os.environ.get("PEERS", "").split() if name.split(".")[0] != me]
heard = set()
listener = socket.create_server(("", {RENDEZVOUS_PORT}))
def accept():
    while True:
        connection, _ = listener.accept()
        with connection:
            heard.add(connection.recv(64).decode())
threading.Thread(target=accept, daemon=True).start()
started = time.monotonic()
deadline = started + 90
resolved = {{}}
for name in peers:
    while True:
        try:
            address = socket.gethostbyname(name)
            resolved.setdefault(name, {{"address": address, "seconds": round(time.monotonic() - started, 2)}})
            with socket.create_connection((address, {RENDEZVOUS_PORT}), timeout=2) as connection:
                connection.sendall(me.encode())
            break
        except OSError as error:
            if time.monotonic() > deadline:
                resolved.setdefault(name, {{"error": str(error)}})
                break
            time.sleep(0.1)
while not {{peer.split(".")[0] for peer in peers}} <= heard and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({{"hostname": me, "address": socket.gethostbyname(me), "fqdn": socket.getfqdn(),
                  "coordinator": os.environ["COORDINATOR"], "resolved": resolved, "heard": sorted(heard)}}))
"""


def reporting_pod(command: list[str] | None = None, gpus: int = 0, peers: list[str] | None = None) -> dict[str, Any]:
    """A pod spec in the runner image that runs REPORT (or `command`), knowing the coordinator's name from its
    label through the downward API, as a benchmark's workers would, and meeting `peers` (none by default)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": images.TAGS["runner"],
        "command": command or ["python", "-c", REPORT],
        "env": [
            {
                "name": "COORDINATOR",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COORDINATOR_LABEL}']"}},
            },
            {"name": "PEERS", "value": " ".join(peers or [])},
        ],
    }
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        spec["tolerations"] = [GPU_TOLERATION]
    return spec


def leader_and_workers(
    namespace: str, name: str, pod: dict[str, Any], *, labels: dict[str, str] | None = None, suspend: bool = False
) -> dict[str, Any]:
    """A JobSet of a "leader" replicatedJob of one pod and a "workers" one of two, the leader its coordinator."""
    return jobset_manifest(
        namespace,
        name,
        [replicated_job("leader", pod), replicated_job("workers", pod, pods=2)],
        labels=labels,
        suspend=suspend,
        coordinator=("leader", 0, 0),
    )


def jobsets_path(namespace: str) -> str:
    return f"/apis/{JOBSET_API_VERSION}/namespaces/{namespace}/jobsets"


def condition_true(item: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in item.get("status", {}).get("conditions", []))


def listed(cluster: KubeCluster, path: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", f"{path}?labelSelector={selector}")["items"]
    return items


def pods_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return listed(cluster, f"/api/v1/namespaces/{namespace}/pods", f"{JOBSET_NAME_LABEL}={name}")


def jobs_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return listed(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs", f"{JOBSET_NAME_LABEL}={name}")


def completed(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] = cluster.request("GET", f"{jobsets_path(namespace)}/{name}")
    assert not condition_true(found, "Failed"), found["status"]
    return found if condition_true(found, "Completed") else None


def report(cluster: KubeCluster, namespace: str, pod: str) -> dict[str, Any]:
    lines = cluster.kubectl("logs", "-n", namespace, pod).stdout.strip().splitlines()
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def test_a_leader_and_two_workers_find_each_other_by_their_stable_names_and_complete(
    kube_cluster: KubeCluster, kube_namespace: str, jobset: JobSet
) -> None:
    name = "bench"
    hostnames = [
        pod_hostname(name, "leader", 0, 0),
        pod_hostname(name, "workers", 0, 0),
        pod_hostname(name, "workers", 0, 1),
    ]
    leader_name = f"{hostnames[0]}.{name}"
    pod = reporting_pod(peers=[f"{hostname}.{name}" for hostname in hostnames])
    kube_cluster.request("POST", jobsets_path(kube_namespace), leader_and_workers(kube_namespace, name, pod))
    found = wait_for("the JobSet to complete", lambda: completed(kube_cluster, kube_namespace, name), 180)
    assert found["status"]["terminalState"] == "Completed"

    # One Indexed Job per replicatedJob (replicas 1), named <jobset>-<replicatedJob>-<jobIndex>, each complete.
    jobs = {job["metadata"]["name"]: job for job in jobs_of(kube_cluster, kube_namespace, name)}
    assert sorted(jobs) == ["bench-leader-0", "bench-workers-0"]
    assert all(condition_true(job, "Complete") for job in jobs.values())
    assert jobs["bench-workers-0"]["status"]["succeeded"] == 2

    # Each pod under its stable hostname <jobset>-<replicatedJob>-<jobIndex>-<podIndex>, in the subdomain of the
    # headless Service, every one told the coordinator's stable name.
    pods = pods_of(kube_cluster, kube_namespace, name)
    assert {pod["spec"]["hostname"] for pod in pods} == set(hostnames)
    assert {pod["spec"]["subdomain"] for pod in pods} == {name}
    assert {pod["status"]["phase"] for pod in pods} == {"Succeeded"}
    assert {pod["metadata"]["labels"][COORDINATOR_LABEL] for pod in pods} == {leader_name}
    addresses = {pod["spec"]["hostname"]: pod["status"]["podIP"] for pod in pods}
    reports = {pod["spec"]["hostname"]: report(kube_cluster, kube_namespace, pod["metadata"]["name"]) for pod in pods}
    for hostname, seen in reports.items():
        assert seen["hostname"] == hostname
        assert seen["address"] == addresses[hostname]
        assert seen["fqdn"] == f"{hostname}.{name}.{kube_namespace}.svc.cluster.local"
        assert seen["coordinator"] == leader_name

    # Every pod resolved every other pod's short stable name through the cluster DNS (devtools/cluster/clusterdns.py,
    # which serves the headless Service's EndpointSlice as CoreDNS does) to that pod's address, reached it there,
    # and was reached by each: the workers found the leader (the coordinator), and the leader each worker.
    for hostname, seen in reports.items():
        peers = {f"{other}.{name}": addresses[other] for other in hostnames if other != hostname}
        assert {peer: result.get("address") for peer, result in seen["resolved"].items()} == peers, reports
        assert seen["heard"] == sorted(other for other in hostnames if other != hostname), reports
    assert reports[hostnames[1]]["resolved"][leader_name]["address"] == addresses[hostnames[0]]
    assert reports[hostnames[0]]["resolved"][f"{hostnames[2]}.{name}"]["address"] == addresses[hostnames[2]]

    # The headless Service JobSet made (its EndpointSlice held each pod's hostname and address while the pods ran:
    # what the DNS answered from; the slice drops a pod once it has completed).
    service = kube_cluster.request("GET", f"/api/v1/namespaces/{kube_namespace}/services/{name}")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {JOBSET_NAME_LABEL: name}
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_deleting_a_jobset_deletes_its_jobs_pods_and_service(
    kube_cluster: KubeCluster, kube_namespace: str, jobset: JobSet
) -> None:
    name = "doomed"
    pod = reporting_pod(["sleep", "600"])
    kube_cluster.request("POST", jobsets_path(kube_namespace), leader_and_workers(kube_namespace, name, pod))

    def all_running() -> bool:
        pods = pods_of(kube_cluster, kube_namespace, name)
        return len(pods) == 3 and all(pod["status"].get("phase") == "Running" for pod in pods)

    wait_for("the JobSet's three pods to run", all_running, 120)
    assert len(jobs_of(kube_cluster, kube_namespace, name)) == 2

    kube_cluster.request("DELETE", f"{jobsets_path(kube_namespace)}/{name}")

    def all_gone() -> bool:
        try:
            kube_cluster.request("GET", f"/api/v1/namespaces/{kube_namespace}/services/{name}")
            return False
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
        return not jobs_of(kube_cluster, kube_namespace, name) and not pods_of(kube_cluster, kube_namespace, name)

    # The garbage collector deletes the Jobs and the Service (owned by the JobSet), then the pods (owned by the
    # Jobs), whose containers end within their grace period of 1 s.
    wait_for("the JobSet's Jobs, pods and Service to be deleted", all_gone, 90)


class ClusterObjects:
    """Kueue's cluster-scoped objects of one test, with unique names, deleted after it."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.suffix = uuid.uuid4().hex[:8]
        self.paths: list[str] = []

    def create(self, path: str, manifest: dict[str, Any]) -> None:
        self.cluster.request("POST", path, manifest)
        self.paths.append(f"{path}/{manifest['metadata']['name']}")

    def delete_all(self) -> None:
        for path in reversed(self.paths):
            try:
                self.cluster.request("DELETE", path)
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise


@pytest.fixture
def cluster_objects(kube_cluster: KubeCluster, kueue: Kueue) -> Iterator[ClusterObjects]:
    objects = ClusterObjects(kube_cluster)
    yield objects
    objects.delete_all()


def test_kueue_admits_a_jobset_whole_once_its_quota_covers_every_pod(
    kube_cluster: KubeCluster, kube_namespace: str, jobset: JobSet, cluster_objects: ClusterObjects
) -> None:
    flavor, queue = f"jobset-gpus-{cluster_objects.suffix}", f"jobset-queue-{cluster_objects.suffix}"
    cluster_objects.create(f"/apis/{KUEUE_API_VERSION}/resourceflavors", resource_flavor(flavor))
    cluster_objects.create(f"/apis/{KUEUE_API_VERSION}/clusterqueues", cluster_queue(queue, flavor, gpus=2))
    kube_cluster.request(
        "POST",
        f"/apis/{KUEUE_API_VERSION}/namespaces/{kube_namespace}/localqueues",
        local_queue(kube_namespace, "team", queue),
    )
    # Three pods of one GPU each against a quota of two. Created suspended, with its queue's label: what Kueue's
    # JobSet webhook (not registered here) would add is already there.
    name = "queued"
    manifest = leader_and_workers(
        kube_namespace, name, reporting_pod(gpus=1), labels={QUEUE_NAME_LABEL: "team"}, suspend=True
    )
    kube_cluster.request("POST", jobsets_path(kube_namespace), manifest)
    workloads_path = f"/apis/{KUEUE_API_VERSION}/namespaces/{kube_namespace}/workloads"

    def pending_workload() -> dict[str, Any] | None:
        for workload in kube_cluster.request("GET", workloads_path)["items"]:
            if any(owner["name"] == name for owner in workload["metadata"].get("ownerReferences", [])):
                found = next(
                    (c for c in workload.get("status", {}).get("conditions", []) if c["type"] == "QuotaReserved"), None
                )
                if found is not None and found["status"] == "False":
                    return dict(workload)
        return None

    workload = wait_for("Kueue to find the JobSet's Workload wanting quota", pending_workload, CLUSTER_PATIENCE_SECONDS)
    # One Workload, a PodSet per replicatedJob, counting all three pods.
    assert {pod_set["name"]: pod_set["count"] for pod_set in workload["spec"]["podSets"]} == {"leader": 1, "workers": 2}
    # Two of its three pods would fit: none runs. JobSet made its Jobs suspended, and they made no pods.
    time.sleep(3)
    assert kube_cluster.request("GET", f"{jobsets_path(kube_namespace)}/{name}")["spec"]["suspend"] is True
    jobs = jobs_of(kube_cluster, kube_namespace, name)
    assert sorted(job["metadata"]["name"] for job in jobs) == ["queued-leader-0", "queued-workers-0"]
    assert all(job["spec"]["suspend"] is True for job in jobs)
    assert pods_of(kube_cluster, kube_namespace, name) == []

    # Room for all three: Kueue admits the Workload, unsuspends the JobSet, and its pods run to completion.
    resource_groups = cluster_queue(queue, flavor, gpus=3)["spec"]["resourceGroups"]
    kube_cluster.request(
        "PATCH",
        f"/apis/{KUEUE_API_VERSION}/clusterqueues/{queue}",
        {"spec": {"resourceGroups": resource_groups}},
        "application/merge-patch+json",
    )
    wait_for("the admitted JobSet to complete", lambda: completed(kube_cluster, kube_namespace, name), 120)
    pods = pods_of(kube_cluster, kube_namespace, name)
    assert sorted(pod["metadata"]["labels"][REPLICATED_JOB_NAME_LABEL] for pod in pods) == [
        "leader",
        "workers",
        "workers",
    ]
    # On the flavor's nodes (Kueue put its node labels into the pods' templates at admission).
    assert {pod["spec"]["nodeSelector"]["nvidia.com/gpu.present"] for pod in pods} == {"true"}
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(kube_cluster.gpu_node_names)
