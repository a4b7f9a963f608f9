"""Queueing through Kueue, in the operator's pure parts: the Job's labels, the reading of Kueue's Workload, and
the phase, conditions, attempts and preemption records built from it (the real Kueue: tests/integration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes.client import ApiClient, ApisApi, V1APIGroup, V1APIGroupList, V1GroupVersionForDiscovery

from batchmark.operator.controller.children import Owner, job
from batchmark.operator.controller.kube import KueueApi
from batchmark.operator.controller.kueue import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WorkloadView,
)
from batchmark.operator.controller.status import JobView, Observation, build_status
from batchmark.operator.controller.watched import (
    JOBS_INDEX,
    LOCAL_QUEUES_INDEX,
    PODS_INDEX,
    WORKLOADS_INDEX,
    ApiChildren,
    IndexedChildren,
    benchmark_job_of,
)
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults
from batchmark.operator.resource.status import Phase, Reason

SPEC: dict[str, Any] = {
    "backend": {"kind": "vllm_python_batch", "model": "Qwen/Qwen3-0.6B", "engine": "simulated"},
    "data": {"kind": "synthetic_text", "promptTokens": 16, "outputTokens": 8},
    "profile": {"kind": "throughput"},
    "constraints": [{"kind": "max_requests", "count": 10}],
}
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-nodes,"
    " 1 more needed"
)
RESULTS = [{"strategy": "throughput", "stopReason": "interrupted by SIGTERM", "requests": 12}]


def workload(conditions: list[dict[str, Any]], preemptions: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions}
    if preemptions:
        status["schedulingStats"] = {
            "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": preemptions}]
        }
    return {"metadata": {"name": "job-sweep-1a2b3"}, "status": status}


def cond(kind: str, status: str, reason: str, message: str = "", time: str = "2026-12-03T10:00:00Z") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": time}


def job_view(suspended: bool, active: int = 0) -> JobView:
    return JobView(name="sweep", created="2026-12-03T09:59:00Z", active=active, suspended=suspended)


def test_a_queued_benchmarks_job_is_suspended_and_labelled() -> None:
    spec = BatchBenchmarkSpec.model_validate({**SPEC, "queueName": "gpus", "priorityClassName": "high"})
    manifest = job(Owner("ns", "sweep", "uid"), spec, workload_priority_class="high")
    assert manifest["spec"]["suspend"] is True
    assert manifest["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpus"
    assert manifest["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "high"
    assert manifest["spec"]["template"]["spec"]["priorityClassName"] == "high"


def test_without_a_workload_priority_class_only_the_queue_label_is_set() -> None:
    spec = BatchBenchmarkSpec.model_validate({**SPEC, "queueName": "gpus", "priorityClassName": "high"})
    labels = job(Owner("ns", "sweep", "uid"), spec)["metadata"]["labels"]
    assert labels[QUEUE_NAME_LABEL] == "gpus"
    assert PRIORITY_CLASS_LABEL not in labels


def test_an_unqueued_benchmarks_job_runs_at_once() -> None:
    manifest = job(Owner("ns", "sweep", "uid"), BatchBenchmarkSpec.model_validate(SPEC))
    assert "suspend" not in manifest["spec"]
    assert QUEUE_NAME_LABEL not in manifest["metadata"]["labels"]


def test_the_operators_default_queue_applies_where_the_spec_names_none() -> None:
    defaults = OperatorDefaults.model_validate({"queueName": "team"})
    assert defaults.apply(BatchBenchmarkSpec.model_validate(SPEC)).queue_name == "team"
    own = BatchBenchmarkSpec.model_validate({**SPEC, "queueName": "mine"})
    assert defaults.apply(own).queue_name == "mine"


def test_a_waiting_workload_gives_kueues_reason_and_message() -> None:
    view = WorkloadView.from_dict(workload([cond("QuotaReserved", "False", "Pending", QUOTA_MESSAGE)]))
    assert (view.admitted, view.reason, view.message, view.preemptions) == (False, "Pending", QUOTA_MESSAGE, 0)


def test_a_preempted_workload_counts_and_names_the_preemption() -> None:
    view = WorkloadView.from_dict(
        workload(
            [
                cond("QuotaReserved", "False", "Pending", QUOTA_MESSAGE),
                cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 1) due to ..."),
                cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload (UID: 1) ..."),
            ],
            preemptions=1,
        )
    )
    assert not view.admitted
    assert view.reason == "Preempted"
    assert view.preemptions == 1
    assert view.preemption_reason == "InClusterQueue"


def queued(status: dict[str, Any], job_: JobView, workload_: WorkloadView | None) -> dict[str, Any]:
    observation = Observation(generation=1, cancel=False, status=status, job=job_, queued=True, workload=workload_)
    update = build_status(observation, timestamp="2026-12-03T10:01:00Z")
    return {**update.fields, "reason": update.reason}


def conditions(fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["type"]: entry for entry in fields["conditions"]}


def test_a_suspended_queued_job_is_queued_with_kueues_message() -> None:
    view = WorkloadView.from_dict(workload([cond("QuotaReserved", "False", "Pending", QUOTA_MESSAGE)]))
    fields = queued({"phase": "Pending"}, job_view(suspended=True), view)
    assert (fields["phase"], fields["reason"], fields["message"]) == (Phase.QUEUED, Reason.PENDING, QUOTA_MESSAGE)
    admitted = conditions(fields)["Admitted"]
    assert (admitted["status"], admitted["message"]) == ("False", QUOTA_MESSAGE)
    assert conditions(fields)["Preempted"]["status"] == "False"


def test_before_kueue_made_the_workload_the_benchmark_is_queued() -> None:
    fields = queued({"phase": "Pending"}, job_view(suspended=True), None)
    assert (fields["phase"], fields["reason"]) == (Phase.QUEUED, Reason.PENDING)


def test_an_admitted_job_leaves_the_queue() -> None:
    view = WorkloadView.from_dict(
        workload(
            [
                cond("QuotaReserved", "True", "QuotaReserved"),
                cond("Admitted", "True", "Admitted", "The workload is admitted"),
            ]
        )
    )
    fields = queued({"phase": "Queued"}, job_view(suspended=False), view)
    assert fields["phase"] == Phase.SCHEDULING
    assert conditions(fields)["Admitted"]["status"] == "True"


def test_a_preemption_is_recorded_with_the_results_the_attempt_wrote() -> None:
    view = WorkloadView.from_dict(
        workload(
            [
                cond("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority workload"),
                cond("Preempted", "True", "InClusterQueue", "Preempted to accommodate a higher priority workload"),
            ],
            preemptions=1,
        )
    )
    running = {"phase": "Running", "attempts": 1}
    fields = queued(running, job_view(suspended=True), view)
    assert fields["phase"] == Phase.QUEUED
    assert fields["reason"] == "Preempted"
    (record,) = fields["preemptions"]
    assert (record["attempt"], record["reason"]) == (1, "InClusterQueue")
    assert "results" not in record  # the runner has not written them yet
    assert conditions(fields)["Preempted"]["status"] == "True"
    assert conditions(fields)["Preempted"]["reason"] == "InClusterQueue"

    # The runner, stopped, writes its partial results; the operator keeps them in the record.
    stored = {**running, **fields, "results": RESULTS, "runId": "run-1"}
    fields = queued(stored, job_view(suspended=True), view)
    (record,) = fields["preemptions"]
    assert (record["results"], record["runId"]) == (RESULTS, "run-1")

    # The rerun: attempts counts it; the record keeps the first attempt's results.
    stored = {**stored, **fields}
    fields = queued(stored, job_view(suspended=False, active=1), view)
    assert fields["attempts"] == 2
    assert fields["preemptions"][0]["results"] == RESULTS


def test_results_of_an_earlier_run_are_not_taken_for_a_later_preemption() -> None:
    view = WorkloadView.from_dict(workload([cond("Preempted", "True", "InClusterQueue", "again")], preemptions=2))
    first = {"time": "t", "attempt": 1, "reason": "InClusterQueue", "message": "", "results": RESULTS, "runId": "run-1"}
    stored = {"phase": "Running", "attempts": 2, "preemptions": [first], "results": RESULTS, "runId": "run-1"}
    fields = queued(stored, job_view(suspended=True), view)
    assert len(fields["preemptions"]) == 2
    assert "results" not in fields["preemptions"][1]
    assert fields["preemptions"][1]["attempt"] == 2


def test_the_queued_example_is_a_valid_queued_benchmark() -> None:
    path = Path(__file__).resolve().parents[3] / "examples" / "kueue" / "queued-benchmark.yaml"
    (document,) = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    manifest = job(Owner("ns", document["metadata"]["name"], "uid"), spec)
    assert manifest["spec"]["suspend"] is True
    assert manifest["metadata"]["labels"][QUEUE_NAME_LABEL] == "benchmarks"


def test_only_the_workloads_of_the_benchmarks_jobs_are_followed() -> None:
    """Another team's Kueue Workloads (their Job is no benchmark's, or only named like one) are left alone."""
    ours = JobView(name="sweep", created="2026-01-01T00:00:00Z", uid="job-uid-1")
    indexed = {JOBS_INDEX: {("team-a", "sweep"): [ours]}, PODS_INDEX: {}, WORKLOADS_INDEX: {}, LOCAL_QUEUES_INDEX: {}}
    indices = IndexedChildren(indexed, cast(ApiChildren, None))

    def owned_by(name: str, uid: str, api_version: str = "batch/v1") -> dict[str, Any]:
        return {"ownerReferences": [{"apiVersion": api_version, "kind": "Job", "name": name, "uid": uid}]}

    assert benchmark_job_of(indices, "team-a", owned_by("sweep", "job-uid-1")) == "sweep"
    assert benchmark_job_of(indices, "team-a", owned_by("training", "job-uid-9")) is None
    assert benchmark_job_of(indices, "team-a", owned_by("sweep", "job-uid-9")) is None  # a namesake
    assert benchmark_job_of(indices, "team-b", owned_by("sweep", "job-uid-1")) is None
    assert benchmark_job_of(indices, "team-a", owned_by("sweep", "job-uid-1", "jobset.x-k8s.io/v1alpha2")) is None
    assert benchmark_job_of(indices, "team-a", {}) is None


class QueuesOfTheApiServer:
    """The API server's answer for LocalQueues the index does not hold, with the lookups it was asked."""

    def __init__(self, existing: set[tuple[str, str]]) -> None:
        self.existing = existing
        self.asked: list[tuple[str, str]] = []

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        self.asked.append((namespace, name))
        return (namespace, name) in self.existing


def test_a_local_queue_in_the_index_costs_no_call_and_one_not_in_it_is_asked_of_the_api_server() -> None:
    api = QueuesOfTheApiServer(existing={("team-a", "made-a-moment-ago")})
    indexed = {JOBS_INDEX: {}, PODS_INDEX: {}, WORKLOADS_INDEX: {}, LOCAL_QUEUES_INDEX: {("team-a", "gpus"): [True]}}
    queues = IndexedChildren(indexed, cast(ApiChildren, api))
    assert queues.local_queue_exists("team-a", "gpus")
    assert api.asked == []
    assert queues.local_queue_exists("team-a", "made-a-moment-ago")  # not yet in kopf's index
    assert not queues.local_queue_exists("team-a", "no-such-queue")
    assert not queues.local_queue_exists("team-b", "gpus")  # another namespace's namesake
    assert api.asked == [("team-a", "made-a-moment-ago"), ("team-a", "no-such-queue"), ("team-b", "gpus")]


class Discovery:
    """The API server's discovery (/apis), serving Kueue's group from the given call on, counting the calls."""

    def __init__(self, served_from_call: int) -> None:
        self.served_from_call = served_from_call
        self.calls = 0

    def get_api_versions(self) -> V1APIGroupList:
        self.calls += 1
        groups = [
            V1APIGroup(name="batch", versions=[V1GroupVersionForDiscovery(group_version="batch/v1", version="v1")])
        ]
        if self.calls >= self.served_from_call:
            version = V1GroupVersionForDiscovery(group_version=f"{KUEUE_GROUP}/{KUEUE_VERSION}", version=KUEUE_VERSION)
            groups.append(V1APIGroup(name=KUEUE_GROUP, versions=[version]))
        return V1APIGroupList(groups=groups)


def test_kueue_installed_after_the_operator_started_is_found_and_then_no_longer_asked_for() -> None:
    kueue_api = KueueApi(ApiClient())
    discovery = Discovery(served_from_call=3)
    kueue_api.apis = cast(ApisApi, discovery)
    assert not kueue_api.installed()
    assert not kueue_api.installed()
    assert kueue_api.installed()
    assert kueue_api.installed()
    assert discovery.calls == 3
