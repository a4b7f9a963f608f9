"""What the operator knows of each benchmark's Job, pods and Kueue Workload, when it builds a status, and of the
LocalQueues a queued benchmark names, when it creates one.

``ApiChildren`` reads them from the API server: a GET of the Job, a LIST of its pods, a LIST of Workloads.
Done on every event of every benchmark, those reads were most of the operator's calls to the API server, and
under load its latency was the time its calls waited there. ``IndexedChildren`` reads them from kopf's indices
instead: kopf keeps them from the watch streams it runs anyway, fills them before it calls any handler (after a
restart too), and updates them from each event before it calls that event's handlers, so a handler that a
change woke reads that change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from batchmark.operator.controller.kube import Kube, KueueApi
from batchmark.operator.controller.kueue import JOB_UID_LABEL, WorkloadView
from batchmark.operator.controller.status import JobView, PodView

BENCHMARK_LABEL = "batchmark.dev/benchmark"
# kopf's names of the indices (the index functions' names, handlers.py).
JOBS_INDEX = "benchmark_jobs"
PODS_INDEX = "benchmark_pods"
WORKLOADS_INDEX = "job_workloads"
LOCAL_QUEUES_INDEX = "local_queues"


class Children(Protocol):
    """A benchmark's Job (same name), its pods, and the Workload Kueue made for the Job."""

    def job(self, namespace: str, name: str, owner_uid: str) -> JobView | None:
        """The benchmark's Job: named as it, and controlled by it (``owner_uid``: the benchmark's uid)."""
        ...

    def pods(self, namespace: str, name: str) -> list[PodView]: ...

    def workload(self, namespace: str, job_uid: str) -> WorkloadView | None: ...

    def is_benchmark_job(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the Job of that name and uid is a benchmark's (labelled as one)."""
        ...

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        """Whether Kueue's LocalQueue of that name exists in the namespace (Kueue's API is served)."""
        ...


class ApiChildren:
    """Read from the API server, at the moment of asking."""

    def __init__(self, kube: Kube, kueue: KueueApi) -> None:
        self.kube = kube
        self.kueue = kueue

    def job(self, namespace: str, name: str, owner_uid: str) -> JobView | None:
        found = self.kube.get_job(namespace, name)
        view = JobView.from_dict(found) if found is not None else None
        return view if view is not None and view.owner_uid == owner_uid else None

    def pods(self, namespace: str, name: str) -> list[PodView]:
        return [PodView.from_dict(pod) for pod in self.kube.list_pods(namespace, name)]

    def workload(self, namespace: str, job_uid: str) -> WorkloadView | None:
        found = self.kueue.workload_of(namespace, job_uid)
        return WorkloadView.from_dict(found) if found is not None else None

    def is_benchmark_job(self, namespace: str, name: str, uid: str) -> bool:
        found = self.kube.get_job(namespace, name)
        metadata = (found or {}).get("metadata") or {}
        return metadata.get("uid") == uid and BENCHMARK_LABEL in (metadata.get("labels") or {})

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return self.kueue.local_queue_exists(namespace, name)


# The index functions: each object of the kind, as the view the status reads, under the key it is looked up by.
def job_entry(namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any]) -> dict[Any, Any] | None:
    benchmark = labels.get(BENCHMARK_LABEL)
    return {(namespace, benchmark): JobView.from_dict(body)} if namespace and benchmark else None


def pod_entry(namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any]) -> dict[Any, Any] | None:
    benchmark = labels.get(BENCHMARK_LABEL)
    return {(namespace, benchmark): PodView.from_dict(body)} if namespace and benchmark else None


def workload_entry(namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any]) -> dict[Any, Any] | None:
    job_uid = labels.get(JOB_UID_LABEL)
    return {(namespace, job_uid): WorkloadView.from_dict(body)} if namespace and job_uid else None


def local_queue_entry(namespace: str | None, body: Mapping[str, Any]) -> dict[Any, Any] | None:
    name = (body.get("metadata") or {}).get("name")
    return {(namespace, name): True} if namespace and name else None


def benchmark_job_of(children: Children, namespace: str, workload_metadata: Mapping[str, Any]) -> str | None:
    """The name of the benchmark Job that owns the Workload; None for a Workload of any other Job (another
    team's, or a namesake's), which the operator leaves alone."""
    for owner in workload_metadata.get("ownerReferences") or []:
        if owner.get("kind") != "Job" or not str(owner.get("apiVersion", "")).startswith("batch/"):
            continue
        name, uid = owner.get("name"), owner.get("uid")
        if name and uid and children.is_benchmark_job(namespace, str(name), str(uid)):
            return str(name)
    return None


class IndexedChildren:
    """Read from kopf's indices (``indices``: the ``kopf.Index`` objects kopf hands every handler, by name).

    A Workload or LocalQueue the index does not hold is looked for in the API server (``api``): Kueue makes a
    Workload only after the Job, a LocalQueue may have been created a moment ago, and their indices start only
    once Kueue's CRDs exist, which may be long after the operator started; a lookup that finds nothing there must
    not be taken for an object that does not exist. A queued benchmark's LocalQueue is nearly always in the
    index: with 200 applied at once, a GET of it for each was a round trip before any of their children.
    """

    def __init__(self, indices: Mapping[str, Any], api: ApiChildren) -> None:
        self.jobs = indices[JOBS_INDEX]
        self.pods_index = indices[PODS_INDEX]
        self.workloads = indices[WORKLOADS_INDEX]
        self.local_queues = indices[LOCAL_QUEUES_INDEX]
        self.api = api

    def job(self, namespace: str, name: str, owner_uid: str) -> JobView | None:
        # A previous benchmark's Job of the same name may still be there while the garbage collector removes it.
        found = [job for job in self.jobs.get((namespace, name), ()) if job.owner_uid == owner_uid]
        return max(found, key=lambda job: job.created) if found else None

    def pods(self, namespace: str, name: str) -> list[PodView]:
        return list(self.pods_index.get((namespace, name), ()))

    def is_benchmark_job(self, namespace: str, name: str, uid: str) -> bool:
        # The index holds only the Jobs labelled as benchmarks'.
        return any(job.uid == uid for job in self.jobs.get((namespace, name), ()))

    def workload(self, namespace: str, job_uid: str) -> WorkloadView | None:
        found: list[WorkloadView] = list(self.workloads.get((namespace, job_uid), ()))
        return found[0] if found else self.api.workload(namespace, job_uid)

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.local_queues or self.api.local_queue_exists(namespace, name)
