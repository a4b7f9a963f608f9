"""Every benchmark ends: a pod that never starts (no node, no image, no container) ends the benchmark Failed at its
start bound (spec.timeouts over the operator's defaults) with the scheduler's or the kubelet's reason, its Job
stopped; time queued in Kueue never counts; a retry says so (reason and condition Retrying, attempts) without a
reason that contradicts its phase. The decisions as pure functions, the clock that wakes them, the reconciler's
stop (the real cluster: tests/integration/operator/test_start_bounds.py)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from batchmark.operator.controller.deadlines import DeadlinePoller, Deadlines
from batchmark.operator.controller.kube import Kube
from batchmark.operator.controller.kueue import WorkloadView
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.controller.stalls import parse_time
from batchmark.operator.controller.status import JobView, Observation, PodView, StatusUpdate, build_status
from batchmark.operator.controller.workers import ControllerThreads
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults, StartBounds, StartTimeouts
from batchmark.operator.resource.status import Phase, Reason

T0 = "2026-01-01T00:00:00Z"
BOUNDS = StartBounds(pending=60, image_pull=120, container_create=30)


def at(seconds: int) -> str:
    """T0 plus ``seconds``, as the status writes times."""
    moment = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


QUEUED = {"kueue.x-k8s.io/queue-name": "gpus"}


def job(
    failed: int = 0,
    suspend: bool = False,
    started: str | None = T0,
    retries: int = 0,
    labels: Mapping[str, str] | None = None,
    active: int | None = None,
) -> JobView:
    status: dict[str, Any] = {"active": (0 if suspend else 1) if active is None else active, "failed": failed}
    if started is not None:
        status["startTime"] = started
    return JobView.from_dict(
        {
            "metadata": {"name": "bb", "creationTimestamp": T0, "uid": "j1", "labels": dict(labels or {})},
            "spec": {"suspend": suspend, "backoffLimit": retries},
            "status": status,
        }
    )


def pod(
    name: str = "bb-1",
    created: str = T0,
    node: str | None = None,
    scheduled_at: str | None = None,
    phase: str = "Pending",
    waiting: tuple[str, str] | None = None,
    terminated: dict[str, Any] | None = None,
    unschedulable: str | None = None,
) -> PodView:
    conditions = []
    if unschedulable is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        )
    if scheduled_at is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at})
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if waiting is not None:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        status["containerStatuses"] = [{"name": "runner", "state": state}]
    if terminated is not None:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": terminated}}]
    return PodView.from_dict(
        {
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node} if node else {},
            "status": status,
        }
    )


def observe(job_view: JobView | None, pods: list[PodView], cancel: bool = False, **status: Any) -> Observation:
    return Observation(
        generation=1,
        cancel=cancel,
        status=status,
        job=job_view,
        pods=pods,
        bounds=BOUNDS,
        queued=job_view is not None and job_view.queued,
    )


def condition(update: StatusUpdate, kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(entry for entry in update.fields["conditions"] if entry["type"] == kind)
    return found


# --- the three stuck pods, and a Job that makes none ----------------------------------------------------------

UNSCHEDULABLE = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
ROOT_IMAGE = "container has runAsNonRoot and image will run as root (pod: bb-1_team(uid), container: runner)"
PULL = 'Back-off pulling image "localhost/does-not-exist:1": ErrImagePull: failed to resolve reference'


@pytest.mark.parametrize(
    ("waiting_pod", "reason", "bound", "field", "said"),
    [
        (pod(unschedulable=UNSCHEDULABLE), Reason.UNSCHEDULABLE, 60, "pending", UNSCHEDULABLE),
        (
            pod(node="gpu-node-0", scheduled_at=at(10), waiting=("ImagePullBackOff", PULL)),
            Reason.IMAGE_PULL_BACK_OFF,
            130,  # from the scheduling, at 10 s
            "imagePull",
            PULL,
        ),
        (
            pod(node="gpu-node-0", scheduled_at=at(10), waiting=("ErrImagePull", PULL)),
            Reason.ERR_IMAGE_PULL,
            130,
            "imagePull",
            PULL,
        ),
        (
            pod(node="gpu-node-0", scheduled_at=at(10), waiting=("CreateContainerConfigError", ROOT_IMAGE)),
            Reason.CREATE_CONTAINER_CONFIG_ERROR,
            40,
            "containerCreate",
            ROOT_IMAGE,
        ),
        (None, Reason.POD_NOT_CREATED, 60, "pending", "the Job created no pod"),
    ],
    ids=["unschedulable", "image-back-off", "image-pull", "root-image", "no-pod"],
)
def test_a_pod_that_never_starts_waits_in_scheduling_until_its_bound_then_fails_with_the_reason(
    waiting_pod: PodView | None, reason: str, bound: int, field: str, said: str
) -> None:
    pods = [waiting_pod] if waiting_pod is not None else []
    started = job(active=1 if pods else 0)  # no pod: a Job that made none (an admission refusal, a quota)
    before = build_status(observe(started, pods, phase="Scheduling"), timestamp=at(bound - 1))
    assert before.phase == Phase.SCHEDULING
    assert before.reason == (reason if waiting_pod is not None else Reason.SCHEDULING)
    assert before.deadline == parse_time(at(bound))  # when the operator's clock refreshes it
    assert before.starting
    assert not before.stalled

    after = build_status(observe(started, pods, **before.fields), timestamp=at(bound))
    assert (after.phase, after.reason) == (Phase.FAILED, reason)
    assert after.message.startswith(f"not started within spec.timeouts.{field} (")
    assert said in after.message
    assert after.stalled  # the reconciler stops the Job
    assert after.changed_phase  # the Warning event Failed, "<reason>: <message>"
    assert after.deadline is None
    assert not after.starting
    assert condition(after, "Failed")["status"] == "True"
    assert condition(after, "Failed")["reason"] == reason
    assert after.fields["completionTime"] == at(bound)

    # Finished is final: a later view of the pod (scheduled after all) changes nothing.
    later = build_status(observe(job(), [pod(node="n", phase="Running")], **after.fields), timestamp=at(bound + 60))
    assert (later.phase, later.reason, later.stalled) == (Phase.FAILED, reason, False)


def test_a_pulling_or_creating_pod_is_progress_which_no_start_bound_ends() -> None:
    pulling = pod(node="gpu-node-0", scheduled_at=T0, waiting=("ContainerCreating", ""))
    update = build_status(observe(job(), [pulling], phase="Scheduling"), timestamp=at(10_000))
    assert (update.phase, update.reason, update.deadline) == (Phase.SCHEDULING, Reason.STARTING, None)
    running = build_status(observe(job(), [pod(node="n", scheduled_at=T0, phase="Running")]), timestamp=at(10_000))
    assert running.phase == Phase.LOADING_ENGINE
    assert (running.deadline, running.starting) == (None, False)


def test_time_queued_in_kueue_never_counts() -> None:
    """A suspended Job (queued) has no pod and no bound; once Kueue admits it, the clock starts at its pod."""
    queued = job(suspend=True, started=None, labels=QUEUED)
    waiting = build_status(observe(queued, [], phase="Queued"), timestamp=at(100_000))
    assert (waiting.phase, waiting.deadline, waiting.stalled) == (Phase.QUEUED, None, False)
    admitted = job(started=at(100_000), labels=QUEUED)
    fresh = pod(created=at(100_001), unschedulable=UNSCHEDULABLE)
    update = build_status(observe(admitted, [fresh], phase="Queued"), timestamp=at(100_030))
    assert (update.phase, update.reason) == (Phase.SCHEDULING, Reason.UNSCHEDULABLE)
    assert update.deadline == parse_time(at(100_061))
    # Preempted: Kueue suspends the Job again, its pod goes; no bound runs while it waits once more.
    preempted = job(suspend=True, started=None, labels=QUEUED)
    back = build_status(observe(preempted, [], phase="Running"), timestamp=at(200_000))
    assert (back.phase, back.deadline) == (Phase.QUEUED, None)


def test_a_cancelled_benchmark_is_cancelled_not_failed_by_a_bound() -> None:
    stuck = pod(unschedulable=UNSCHEDULABLE)
    update = build_status(observe(job(), [stuck], cancel=True, phase="Scheduling"), timestamp=at(10_000))
    assert update.phase == Phase.SCHEDULING  # until the suspended Job's pod is gone: then Cancelled
    assert (update.stalled, update.deadline) == (False, None)


def test_without_bounds_a_waiting_pod_waits() -> None:
    observation = Observation(generation=1, cancel=False, status={}, job=job(), pods=[pod(unschedulable="no")])
    update = build_status(observation, timestamp=at(10_000_000))
    assert (update.phase, update.deadline) == (Phase.SCHEDULING, None)


# --- retries ------------------------------------------------------------------------------------------------


def test_a_retry_says_so_in_its_reason_condition_and_attempts_never_with_a_contradicting_reason() -> None:
    first = pod(
        name="bb-a",
        node="gpu-node-0",
        scheduled_at=T0,
        phase="Failed",
        terminated={"exitCode": 137, "reason": "OOMKilled"},
    )
    retry = pod(name="bb-b", created=at(30), node="gpu-node-1", scheduled_at=at(31), waiting=("ImagePullBackOff", PULL))
    update = build_status(observe(job(failed=1, retries=2), [first, retry], phase="Running", attempts=1), at(40))
    # The phase the benchmark had reached stays; the reason is Retrying, the kubelet's word in the message.
    assert (update.phase, update.reason) == (Phase.RUNNING, Reason.RETRYING)
    assert f"ImagePullBackOff: {PULL}" in update.message
    assert update.fields["attempts"] == 2
    assert update.warning  # a Warning event Retrying
    retrying = condition(update, "Retrying")
    assert (retrying["status"], retrying["reason"]) == ("True", Reason.OOM_KILLED)
    assert retrying["message"].startswith("1 of at most 3 attempts failed, the Job runs another; the last: pod bb-a")
    # The retry's pod waits to start: the stuck-scheduling alert's series, and the bound of its wait.
    assert update.starting
    assert update.deadline == parse_time(at(151))

    ended = build_status(observe(job(failed=1, retries=2), [first, retry], **update.fields), at(151))
    assert (ended.phase, ended.reason) == (Phase.FAILED, Reason.IMAGE_PULL_BACK_OFF)
    assert ended.stalled
    assert condition(ended, "Retrying")["status"] == "False"


def test_a_retry_between_pods_and_after_an_unexplained_failure_says_pod_failed() -> None:
    first = pod(name="bb-a", node="n", scheduled_at=T0, phase="Failed", terminated={"exitCode": 1, "reason": "Error"})
    between = build_status(observe(job(failed=1, retries=1), [first], phase="LoadingEngine"), at(5))
    assert (between.phase, between.reason) == (Phase.LOADING_ENGINE, Reason.RETRYING)
    retrying = condition(between, "Retrying")
    assert (retrying["status"], retrying["reason"]) == ("True", Reason.POD_FAILED)
    assert "pod bb-a failed (exit code 1)" in retrying["message"]
    assert between.deadline is None  # the Job's back-off before the next pod is no stall
    # The failed pod is gone (deleted, as a node drain does): still a retry.
    gone = build_status(observe(job(failed=1, retries=1, active=0), [], phase="Running"), at(10_000))
    assert (gone.reason, condition(gone, "Retrying")["reason"]) == (Reason.RETRYING, Reason.POD_FAILED)
    assert (gone.phase, gone.deadline) == (Phase.RUNNING, None)  # a Job between pods is no Job that makes none


def test_a_pod_the_index_has_not_seen_yet_is_no_missing_pod() -> None:
    update = build_status(observe(job(active=1), [], phase="Scheduling"), at(10_000))
    assert (update.phase, update.deadline) == (Phase.SCHEDULING, None)


def test_a_benchmark_never_retried_says_not_retrying() -> None:
    update = build_status(observe(job(), [pod(node="n", scheduled_at=T0, phase="Running")]), at(5))
    assert condition(update, "Retrying") == {
        "type": "Retrying",
        "status": "False",
        "reason": "NotRetrying",
        "message": "",
        "lastTransitionTime": at(5),
        "observedGeneration": 1,
    }


# --- the fields: spec.timeouts and the defaults file ------------------------------------------------------


def spec_with(timeouts: Any) -> dict[str, Any]:
    return {
        "backend": {"kind": "vllm_python_batch", "model": "Qwen/Qwen3-0.6B", "engine": "simulated"},
        "data": {"kind": "synthetic_text", "promptTokens": 16, "outputTokens": 16},
        "profile": {"kind": "throughput"},
        "constraints": [{"kind": "max_requests", "count": 1}],
        "timeouts": timeouts,
    }


@pytest.mark.parametrize(
    ("timeouts", "named"),
    [
        ({"pending": 0}, "timeouts.pending"),
        ({"imagePull": -5}, "timeouts.imagePull"),
        ({"containerCreate": 604801}, "timeouts.containerCreate"),
        ({"pending": "10m"}, "timeouts.pending"),
        ({"pending": 1.5}, "timeouts.pending"),
        ({"pending": 10**30}, "timeouts.pending"),
        ({"queued": 5}, "timeouts.queued"),
        ("soon", "timeouts"),
    ],
)
def test_a_bad_spec_timeouts_is_a_validation_error_naming_the_field(timeouts: Any, named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        BatchBenchmarkSpec.model_validate(spec_with(timeouts))
    locations = [".".join(str(part) for part in error["loc"]) for error in refused.value.errors()]
    assert any(location.startswith(named) for location in locations), locations


def test_the_spec_overrides_each_default_it_gives() -> None:
    defaults = OperatorDefaults.model_validate({"timeouts": {"pending": 100, "imagePull": 200, "containerCreate": 300}})
    spec = BatchBenchmarkSpec.model_validate(spec_with({"imagePull": 5}))
    assert defaults.bounds(spec.timeouts) == StartBounds(pending=100, image_pull=5, container_create=300)
    assert defaults.bounds(None) == StartBounds(pending=100, image_pull=200, container_create=300)
    assert OperatorDefaults().bounds(StartTimeouts()) == StartBounds(pending=3600, image_pull=900, container_create=900)


# --- the clock that wakes a benchmark at its bound -------------------------------------------------------


def test_deadlines_are_taken_once_due_and_forgotten_on_request() -> None:
    deadlines = Deadlines()
    deadlines.set("a", "one", parse_time(at(10)))
    deadlines.set("a", "two", parse_time(at(20)))
    deadlines.set("b", "gone", parse_time(at(5)))
    deadlines.forget("b", "gone")
    assert deadlines.take_due(parse_time(at(9)) or datetime.datetime.now(datetime.UTC)) == []
    assert deadlines.take_due(parse_time(at(10)) or datetime.datetime.now(datetime.UTC)) == [("a", "one")]
    assert deadlines.take_due(parse_time(at(15)) or datetime.datetime.now(datetime.UTC)) == []
    deadlines.set("a", "two", None)  # a refresh found no bound any more
    assert len(deadlines) == 0


def test_the_poller_refreshes_the_due_benchmarks_and_asks_again_after_a_failed_refresh() -> None:
    deadlines = Deadlines()
    now = parse_time(at(100))
    assert now is not None
    deadlines.set("a", "due", parse_time(at(99)))
    deadlines.set("a", "failing", parse_time(at(100)))
    deadlines.set("a", "later", parse_time(at(101)))
    refreshed: list[tuple[str, str]] = []

    async def refresh(namespace: str, name: str) -> None:
        refreshed.append((namespace, name))
        if name == "failing":
            raise RuntimeError("the API server said no")

    poller = DeadlinePoller(deadlines, refresh, interval=0.01, clock=lambda: now)
    asyncio.run(poller.poll_once())
    assert sorted(refreshed) == [("a", "due"), ("a", "failing")]
    refreshed.clear()
    asyncio.run(poller.poll_once())
    assert refreshed == [("a", "failing")]  # asked again; "due" waits for its refresh to record the next bound


# --- the reconciler: a stuck pod's Job is stopped before the status says Failed ------------------------------


class FakeKube(Kube):
    """One benchmark (spec.timeouts.pending: 5), the calls the reconciler makes; no API server."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(client.ApiClient())
        self.spec = dict(spec)
        self.status: dict[str, Any] = {"phase": "Scheduling"}
        self.calls: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        metadata = {"name": name, "namespace": namespace, "uid": "b1", "generation": 1}
        return {"metadata": metadata, "spec": self.spec, "status": dict(self.status)}

    def patch_status(self, namespace: str, name: str, fields: Mapping[str, Any]) -> None:
        self.calls.append(f"status {fields.get('phase')}")
        self.status = {key: value for key, value in {**self.status, **fields}.items() if value is not None}

    def suspend_job(self, namespace: str, name: str) -> None:
        self.calls.append(f"suspend {namespace}/{name}")

    def event(self, benchmark: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))


class StuckChildren:
    """A started Job whose one pod no node takes (created an hour ago), and its Workload when queued."""

    def __init__(self, queued: bool) -> None:
        labels = {"kueue.x-k8s.io/queue-name": "gpus"} if queued else {}
        self.job_view = JobView.from_dict(
            {
                "metadata": {"name": "bb", "uid": "j1", "creationTimestamp": T0, "labels": labels},
                "spec": {},
                "status": {"active": 1, "startTime": T0},
            }
        )
        self.queued = queued

    def job(self, namespace: str, name: str, owner_uid: str) -> JobView | None:
        return self.job_view

    def pods(self, namespace: str, name: str) -> list[PodView]:
        view = pod(unschedulable=UNSCHEDULABLE)
        return [PodView(**{**view.__dict__, "owner_uid": "j1"})]

    def workload(self, namespace: str, job_uid: str) -> WorkloadView | None:
        return WorkloadView(name="job-bb-1", admitted=True) if self.queued else None

    def is_benchmark_job(self, namespace: str, name: str, uid: str) -> bool:
        return True

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return True


@pytest.mark.parametrize("queued", [False, True], ids=["plain", "kueue"])
def test_a_benchmark_its_bound_ended_has_its_job_stopped_an_event_and_no_more_deadline(queued: bool) -> None:
    kube = FakeKube({"timeouts": {"pending": 5}})
    reconciler = Reconciler(kube, ControllerThreads(), metrics=OperatorMetrics())
    reconciler.children = StuckChildren(queued)
    deactivated: list[str] = []
    reconciler.kueue.deactivate = lambda namespace, name: deactivated.append(f"{namespace}/{name}")  # type: ignore[method-assign]
    update = reconciler.refresh("team", "bb")
    assert update is not None
    assert (update.phase, update.reason) == (Phase.FAILED, Reason.UNSCHEDULABLE)
    assert "spec.timeouts.pending (5 s)" in update.message
    if queued:
        # Through Kueue, which would resume a Job suspended under an admitted Workload.
        assert (deactivated, kube.calls) == (["team/job-bb-1"], ["status Failed"])
    else:
        assert (deactivated, kube.calls) == ([], ["suspend team/bb", "status Failed"])
    assert kube.events == [("Warning", "Failed", f"Unschedulable: {update.message}")]
    assert len(reconciler.deadlines) == 0
    assert (
        reconciler.metrics.registry.get_sample_value(
            "batchmark_operator_benchmark_starting", {"namespace": "team", "name": "bb"}
        )
        is None
    )


def test_a_waiting_benchmark_is_on_the_clock_and_in_the_alerts_series() -> None:
    kube = FakeKube({})  # the operator's defaults: an hour to get a node
    reconciler = Reconciler(kube, ControllerThreads(), metrics=OperatorMetrics())
    children = StuckChildren(queued=False)
    fresh = pod(created=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), unschedulable="no")
    children.pods = lambda namespace, name: [PodView(**{**fresh.__dict__, "owner_uid": "j1"})]  # type: ignore[method-assign]
    reconciler.children = children
    update = reconciler.refresh("team", "bb")
    assert update is not None
    assert (update.phase, update.reason) == (Phase.SCHEDULING, Reason.UNSCHEDULABLE)
    assert not any(call.startswith("suspend") for call in kube.calls)
    assert len(reconciler.deadlines) == 1
    assert update.deadline is not None
    assert 3590 <= (update.deadline - datetime.datetime.now(datetime.UTC)).total_seconds() <= 3600
    starting = {"namespace": "team", "name": "bb"}
    assert reconciler.metrics.registry.get_sample_value("batchmark_operator_benchmark_starting", starting) == 1
    reconciler.forget("team", "bb")
    assert len(reconciler.deadlines) == 0
    assert reconciler.metrics.registry.get_sample_value("batchmark_operator_benchmark_starting", starting) is None
