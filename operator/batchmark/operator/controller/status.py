"""The one place that decides a BatchBenchmark's phase, reason and conditions, from its Job and pods.

Each status field has one writer, named in batchmark.runner.contract: the operator's fields
(``OPERATOR_STATUS_FIELDS``) are built here, by ``build_status``; the runner writes its own from the pod
(``RUNNER_STATUS_FIELDS``), and the operator copies them from the pod's termination message only when the run
finished and the runner could not write them (``OPERATOR_FALLBACK_FIELDS``).

Everything here is a pure function over typed views of the Kubernetes objects, tested directly.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from batchmark.operator.controller.jobset import JOB_INDEX_LABEL, JOBSET_UID_LABEL, REPLICATED_JOB
from batchmark.operator.controller.kueue import QUEUE_NAME_LABEL, WorkloadView
from batchmark.operator.controller.positions import QueuePosition
from batchmark.operator.controller.stalls import (
    CONTAINER_WAITING_REASONS,
    IMAGE_WAITING_REASONS,
    Stall,
    parse_time,
    stall,
)
from batchmark.operator.resource.api import Condition, StartBounds
from batchmark.operator.resource.status import FINISHED_PHASES, ConditionType, Phase, Reason
from batchmark.runner.contract import EXIT_OUTPUT_FAILED, EXIT_USAGE
from batchmark.runner.statusfields import RegressionStatus, RunnerImageStatus, parse_summary

# The runner's exit codes on which the Job's pod failure policy fails the Job at once (children.job): a refused
# configuration would be refused again, and a run whose results store failed has its results in the status.
NOT_RETRIED_EXIT_CODES = (EXIT_USAGE, EXIT_OUTPUT_FAILED)

RUNNER_CONTAINER = "runner"
CONDITION_TYPES = (
    ConditionType.SCHEDULED,
    ConditionType.ENGINE_LOADED,
    ConditionType.COMPLETE,
    ConditionType.FAILED,
    ConditionType.RETRYING,
)
# Only on a benchmark queued through Kueue (spec.queueName).
QUEUE_CONDITION_TYPES = (ConditionType.ADMITTED, ConditionType.PREEMPTED)
_MESSAGE_LIMIT = 1024
_PREEMPTIONS_KEPT = 20  # the status schema's bound
# Reasons worth a Warning event while the benchmark has not ended: a pod that waits for what may never come.
_WARNING_REASONS = (Reason.UNSCHEDULABLE, Reason.RETRYING, *IMAGE_WAITING_REASONS, *CONTAINER_WAITING_REASONS)


def controller_uid(metadata: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its owner reference with controller: true), if any."""
    for reference in metadata.get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference.get("uid") or "") or None
    return None


@dataclass(frozen=True)
class PodView:
    """What the status needs of one of the Job's pods."""

    name: str
    created: str
    phase: str
    node_name: str | None = None
    scheduled: bool | None = None  # PodScheduled condition; None: not reported yet
    scheduled_at: str | None = None  # when it was bound to its node (PodScheduled's lastTransitionTime)
    unschedulable_message: str | None = None
    waiting_reason: str | None = None  # the runner container's, e.g. ImagePullBackOff
    waiting_message: str | None = None
    exit_code: int | None = None
    terminated_reason: str | None = None  # e.g. OOMKilled, Error, Completed
    termination_message: str | None = None
    image: str | None = None  # the runner container's, as the kubelet reports it
    image_id: str | None = None  # its imageID (with the digest), once the container runtime has the image
    deleting: bool = False
    owner_uid: str | None = None  # its Job's uid: a pod of a previous benchmark's Job of the same name is not ours
    jobset_uid: str | None = None  # a JobSet's pod: the JobSet's uid (its Job is the JobSet's)
    member: int = 0  # a JobSet's pod: its Job's index among the JobSet's

    @classmethod
    def from_dict(cls, pod: Mapping[str, Any]) -> PodView:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        scheduled: bool | None = None
        scheduled_at: str | None = None
        unschedulable: str | None = None
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled":
                scheduled = condition.get("status") == "True"
                if scheduled:
                    scheduled_at = str(condition.get("lastTransitionTime") or "") or None
                if not scheduled and condition.get("reason") == "Unschedulable":
                    unschedulable = condition.get("message") or "no node fits the pod"
        view = cls(
            name=metadata.get("name", ""),
            created=str(metadata.get("creationTimestamp") or ""),
            phase=status.get("phase") or "Pending",
            node_name=spec.get("nodeName"),
            scheduled=scheduled,
            scheduled_at=scheduled_at,
            unschedulable_message=unschedulable,
            deleting=metadata.get("deletionTimestamp") is not None,
            owner_uid=controller_uid(metadata),
            jobset_uid=labels.get(JOBSET_UID_LABEL),
            member=int(index) if (index := labels.get(JOB_INDEX_LABEL, "0")).isdigit() else 0,
        )
        for container in status.get("containerStatuses") or []:
            if container.get("name") != RUNNER_CONTAINER:
                continue
            state = container.get("state") or {}
            waiting = state.get("waiting") or {}
            terminated = state.get("terminated") or {}
            return cls(
                **{
                    **view.__dict__,
                    "waiting_reason": waiting.get("reason"),
                    "waiting_message": waiting.get("message"),
                    "exit_code": terminated.get("exitCode"),
                    "terminated_reason": terminated.get("reason"),
                    "termination_message": terminated.get("message"),
                    "image": container.get("image") or None,
                    "image_id": container.get("imageID") or None,
                }
            )
        return view


@dataclass(frozen=True)
class JobView:
    """What the status needs of the benchmark's Job."""

    name: str
    created: str
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    suspended: bool = False
    started: str | None = None  # status.startTime: when the Job controller last started it (reset on a resume)
    backoff_limit: int = 0  # spec.retries
    complete: bool = False
    failed_reason: str | None = None  # DeadlineExceeded, BackoffLimitExceeded, ...
    failed_message: str | None = None
    completion_time: str | None = None
    uid: str = ""  # Kueue's Workload for the Job carries it
    queue_name: str | None = None  # Kueue's queue-name label (spec.queueName): the LocalQueue it waits in
    owner_uid: str | None = None  # its BatchBenchmark's uid: a Job left by a previous one of the same name is not ours
    members: int = 1  # pods run at once: above 1, this is the benchmark's JobSet (from_jobset)
    restarts: int = 0  # a JobSet's: times it was restarted whole (spec.retries)
    failed_member: int | None = None  # a failed JobSet's: the index of its Job that failed first, where it says

    @property
    def queued(self) -> bool:
        """Created to wait in a Kueue LocalQueue."""
        return self.queue_name is not None

    def owns(self, pod: PodView) -> bool:
        """Whether the pod is this Job's (or this JobSet's), not one of a previous benchmark of the same name."""
        return bool(self.uid) and self.uid in (pod.owner_uid, pod.jobset_uid)

    @classmethod
    def from_jobset(cls, jobset: Mapping[str, Any]) -> JobView:
        """The view of a benchmark's JobSet, which stands for its Job: its Jobs' pods counted together, Completed
        as complete, Failed with JobSet's reason (e.g. FailedJobs), its restarts as a Job's retries."""
        metadata = jobset.get("metadata") or {}
        spec = jobset.get("spec") or {}
        status = jobset.get("status") or {}
        replicated = status.get("replicatedJobsStatus") or []
        ending = _ending(status.get("conditions") or [], "Completed", None)
        members = sum(int(job.get("replicas") or 0) for job in spec.get("replicatedJobs") or [])
        return cls(
            **_identity(metadata),
            **ending,
            active=sum(int(job.get("active") or 0) for job in replicated),
            succeeded=sum(int(job.get("succeeded") or 0) for job in replicated),
            failed=sum(int(job.get("failed") or 0) for job in replicated),
            suspended=bool(spec.get("suspend")),
            started=str(metadata.get("creationTimestamp") or "") or None,
            backoff_limit=int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0),
            members=max(members, 1),
            restarts=int(status.get("restarts") or 0),
            failed_member=_first_failed_member(ending["failed_message"]),
        )

    @classmethod
    def from_dict(cls, job: Mapping[str, Any]) -> JobView:
        metadata = job.get("metadata") or {}
        status = job.get("status") or {}
        return cls(
            **_identity(metadata),
            **_ending(status.get("conditions") or [], "Complete", status.get("completionTime")),
            active=int(status.get("active") or 0),
            succeeded=int(status.get("succeeded") or 0),
            failed=int(status.get("failed") or 0),
            suspended=bool((job.get("spec") or {}).get("suspend")),
            started=str(status.get("startTime") or "") or None,
            backoff_limit=int((job.get("spec") or {}).get("backoffLimit") or 0),
        )


def _identity(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A Job's (or JobSet's) fields of JobView from its metadata."""
    return {
        "name": metadata.get("name", ""),
        "created": str(metadata.get("creationTimestamp") or ""),
        "uid": str(metadata.get("uid") or ""),
        "queue_name": (metadata.get("labels") or {}).get(QUEUE_NAME_LABEL),
        "owner_uid": controller_uid(metadata),
    }


def _ending(conditions: Sequence[Mapping[str, Any]], complete_type: str, finished_at: Any) -> dict[str, Any]:
    """How a Job (complete_type Complete) or a JobSet (Completed) ended, from its true conditions; ``finished_at``:
    its own completion time, where it gives one (else the condition's)."""
    complete = False
    failed_reason = failed_message = None
    for condition in conditions:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == complete_type:
            complete = True
            finished_at = finished_at or condition.get("lastTransitionTime")
        elif condition.get("type") == "Failed":
            failed_reason = condition.get("reason") or "Failed"
            failed_message = condition.get("message")
            finished_at = finished_at or condition.get("lastTransitionTime")
    return {
        "complete": complete,
        "failed_reason": failed_reason,
        "failed_message": failed_message,
        "completion_time": str(finished_at) if finished_at else None,
    }


# JobSet's message when it fails names the Job that failed first, `... (first failed job: <jobset>-<rjob>-<index>)`.
_FIRST_FAILED_JOB = re.compile(r"first failed job: \S*?-(\d+)\)?$")


def _first_failed_member(message: str | None) -> int | None:
    found = _FIRST_FAILED_JOB.search(message or "")
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Observation:
    """Everything the phase depends on, read at one moment."""

    generation: int
    cancel: bool
    status: Mapping[str, Any]  # the resource's status as stored (both writers' fields)
    job: JobView | None
    pods: Sequence[PodView] = ()
    invalid: str | None = None  # why the spec cannot run, found before any Job was made
    invalid_reason: Reason = Reason.INVALID_CONFIG  # or KUEUE_NOT_INSTALLED, LOCAL_QUEUE_NOT_FOUND
    queued: bool = False  # spec.queueName: the Job waits in a Kueue LocalQueue
    workload: WorkloadView | None = None  # Kueue's Workload for the Job, once it exists
    position: QueuePosition | None = None  # the Workload's place in its queue, where Kueue reports it
    # How long its pod may take to start (spec.timeouts over the operator's defaults); None: unbounded.
    bounds: StartBounds | None = None
    replicas: int | None = None  # engine replicas the spec measures at once (the REPLICAS column); None: not said
    baseline: bool = False  # spec.baseline: the benchmark has a Regressed condition


@dataclass(frozen=True)
class StatusUpdate:
    """The operator's fields of the status, and the transition to announce (an event) if the phase changed."""

    fields: dict[str, Any]
    phase: Phase
    reason: str
    message: str
    previous_phase: str | None
    warning: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # When a start bound of the waiting pod passes (the status is to be built again then); None: none pending.
    deadline: datetime.datetime | None = None
    # A start bound ended the benchmark just now: its Job is to be stopped, or its pod would run after all.
    stalled: bool = False
    # The current attempt's pod waits to start (phase Scheduling, or a retry's new pod under a later phase).
    starting: bool = False

    @property
    def changed_phase(self) -> bool:
        return self.phase != self.previous_phase


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_status(observation: Observation, timestamp: str | None = None) -> StatusUpdate:
    """The operator's status fields for what is observed; finished phases never change again."""
    stored = observation.status
    previous: str | None = stored.get("phase")
    when = timestamp or now()
    job = observation.job
    pod = _current_pod(observation.pods, job)
    deadline, stalled, starting = None, False, False
    if previous in FINISHED_PHASES:
        phase = Phase(previous)
        reason, message = stored.get("reason") or phase, stored.get("message") or ""
    else:
        # The current attempt's own phase first (a retry's pod may be back at Scheduling), then its start bound.
        attempt_phase, reason, message = _phase(observation, pod)
        stuck = _stall(observation, pod, attempt_phase)
        if stuck is not None and stuck.passed(parse_time(when) or datetime.datetime.now(datetime.UTC)):
            attempt_phase, reason, message, stalled = Phase.FAILED, stuck.reason, stuck.failure_message(), True
        elif stuck is not None:
            deadline = stuck.deadline
        starting = attempt_phase == Phase.SCHEDULING
        phase, reason, message = _never_backwards(previous, attempt_phase, reason, message, observation)
    warning = phase == Phase.FAILED or reason in _WARNING_REASONS
    fields: dict[str, Any] = {
        "phase": phase,
        "reason": reason,
        "message": message[:_MESSAGE_LIMIT],
        "observedGeneration": observation.generation,
        "conditions": _conditions(stored.get("conditions") or [], phase, reason, message, pod, observation, when),
    }
    if observation.replicas is not None:
        fields["replicas"] = observation.replicas
    if job is not None:
        fields["jobName"] = job.name
        fields["startTime"] = stored.get("startTime") or job.created or when
        # Pods replaced by retries are counted by the Job even once deleted; pods stopped because Kueue
        # preempted the benchmark are not (a suspended Job's pods are no failures), so those count apart.
        preempted = observation.workload.preemptions if observation.workload is not None else 0
        started = job.active + job.succeeded + job.failed + preempted
        if job.members > 1:  # a JobSet's attempts are its whole runs, not its pods
            started = (job.restarts + 1 if job.active or job.succeeded or job.failed else 0) + preempted
        fields["attempts"] = max(int(stored.get("attempts") or 0), started)
        if observation.queued:
            preemptions = _preemptions(observation, when)
            if preemptions:
                fields["preemptions"] = preemptions
            # None (cleared, in a merge patch) once it no longer waits, or where no position is known.
            workload, position = observation.workload, observation.position
            waiting = phase == Phase.QUEUED and workload is not None and not workload.admitted
            fields["queue"] = position.status() if waiting and position is not None else None
    if pod is not None:
        fields["podName"] = pod.name
        if pod.node_name:
            fields["nodeName"] = pod.node_name
        if pod.image and pod.image_id:
            # Left as stored until the pod reports both: a retry's pod that waits for its image keeps the earlier
            # pod's, which names that pod.
            image = RunnerImageStatus(image=pod.image, image_id=pod.image_id, pod_name=pod.name)
            fields["runnerImage"] = image.model_dump(mode="json", by_alias=True)
    if phase in FINISHED_PHASES:
        fields["completionTime"] = stored.get("completionTime") or (job.completion_time if job else None) or when
    return StatusUpdate(
        fields, phase, reason, message, previous, warning, deadline=deadline, stalled=stalled, starting=starting
    )


def _stall(observation: Observation, pod: PodView | None, attempt_phase: Phase) -> Stall | None:
    """What keeps the current pod from starting, with its bound: only while the attempt waits to run (not
    queued in Kueue, not finished, not being cancelled) and where the benchmark has bounds."""
    job, bounds = observation.job, observation.bounds
    if job is None or bounds is None or observation.cancel:
        return None
    if attempt_phase in FINISHED_PHASES or attempt_phase == Phase.QUEUED:
        return None
    return stall(job, pod, bounds)


# The order of the phases (the documented state machine): Pending -> (Queued) -> Scheduling -> LoadingEngine ->
# Running -> Succeeded | Failed | Cancelled. A phase may be skipped (seen too briefly), never gone back to.
_ORDER = {Phase.PENDING: 0, Phase.QUEUED: 1, Phase.SCHEDULING: 2, Phase.LOADING_ENGINE: 3, Phase.RUNNING: 4}


def _never_backwards(
    previous: str | None, phase: Phase, reason: str, message: str, observation: Observation
) -> tuple[Phase, str, str]:
    """The phase, unless it lies before the stored one: then the stored one, with the reason and message of
    what happens now: a retry's pod that waits (for a node, its image) says so as Retrying, with the kubelet's
    reason in the message, never as a reason that contradicts the phase. The one way back is Queued: Kueue
    preempted the benchmark and it waits in its queue to run again."""
    if previous not in _ORDER or phase not in _ORDER or _ORDER[phase] >= _ORDER[Phase(previous)]:
        return phase, reason, message
    if phase == Phase.QUEUED and observation.queued:
        return phase, reason, message
    if observation.job is not None and observation.job.failed:
        return Phase(previous), Reason.RETRYING, f"a pod failed; the Job runs another: {reason}: {message}"
    return Phase(previous), reason, message


def _current_pod(pods: Sequence[PodView], job: JobView | None = None) -> PodView | None:
    """The pod the phase follows: the newest (after a retry the earlier ones only tell history). Of a benchmark
    over several pods, which is only as far as its slowest pod: a failed pod (the first to fail, where JobSet
    says), else the least advanced one while one is not running yet, else pod 0 (whose runner reports the
    progress)."""
    if not pods:
        return None
    members = job.members if job is not None else 1
    if members == 1:
        return max(pods, key=lambda pod: (pod.created, pod.name))
    newest: dict[int, PodView] = {}
    for pod in sorted(pods, key=lambda pod: (pod.created, pod.name)):
        newest[pod.member] = pod
    current = sorted(newest.values(), key=lambda pod: pod.member)
    # The pod that failed first is the one JobSet did not stop: it stops the others by deleting their Jobs.
    failed = sorted((pod for pod in current if pod.phase == "Failed"), key=lambda pod: (pod.deleting, pod.member))
    first = job.failed_member if job is not None else None
    failed.sort(key=lambda pod: pod.member != first)
    if failed:
        return failed[0]
    laggard = min(current, key=lambda pod: (_stage(pod), pod.member))
    if _stage(laggard) < _STAGE_RUNNING:
        return laggard
    # Every pod made runs, and a pod not made yet is behind them all (its Job has not created it).
    return current[0] if len(current) == members else None


_STAGE_RUNNING = 3


def _stage(pod: PodView) -> int:
    """How far a pod got: 0 no node, 1 waiting for its image or container, 2 starting, 3 running, 4 done."""
    if pod.phase in ("Succeeded", "Failed"):
        return 4
    if not pod.node_name:
        return 0
    if pod.waiting_reason in (*IMAGE_WAITING_REASONS, *CONTAINER_WAITING_REASONS):
        return 1
    return _STAGE_RUNNING if pod.phase == "Running" else 2


def _phase(observation: Observation, pod: PodView | None) -> tuple[Phase, str, str]:
    job = observation.job
    if observation.invalid is not None:
        return Phase.FAILED, observation.invalid_reason, observation.invalid
    if job is None:
        if observation.cancel:
            return Phase.CANCELLED, Reason.CANCELLED, "cancelled before it started"
        return Phase.PENDING, Reason.CREATED, "creating the benchmark's Job"
    if job.complete:
        return Phase.SUCCEEDED, Reason.COMPLETED, "the benchmark finished"
    # Not before the pods' processes ended: on SIGTERM the runners are still writing their partial results.
    alive = _pod_alive(pod) if job.members == 1 else any(_pod_alive(each) for each in observation.pods)
    if observation.cancel and not alive:
        return Phase.CANCELLED, Reason.CANCELLED, "cancelled (spec.cancel); the results so far are kept"
    if job.failed_reason is not None or _fails_its_job(job, pod):
        return _failure(job, pod)
    if observation.cancel:
        return _running_phase(observation, pod, Reason.CANCELLING, "stopping the benchmark (spec.cancel)")
    if observation.queued and job.suspended:
        return _queued(observation.workload, observation.position)
    return _running_phase(observation, pod, None, None)


def _queued(workload: WorkloadView | None, position: QueuePosition | None) -> tuple[Phase, str, str]:
    """Waiting for Kueue to admit the Job: Kueue's own reason and message (e.g. insufficient quota), after the
    position in the queue where Kueue reports one."""
    if workload is None:
        return Phase.QUEUED, Reason.PENDING, "waiting for Kueue to create the benchmark's Workload"
    if workload.admitted:
        return Phase.QUEUED, Reason.ADMITTED, workload.admitted_message or "admitted by Kueue; the Job starts"
    return Phase.QUEUED, workload.reason, _waiting_message(workload, position)


def _waiting_message(workload: WorkloadView, position: QueuePosition | None) -> str:
    # First: a long message of Kueue's is cut at the status's bound, the position must not be.
    return f"{position.describe()}; {workload.message}" if position is not None else workload.message


def _preemptions(observation: Observation, when: str) -> list[dict[str, Any]]:
    """The stored preemption records, one more for each new preemption Kueue counted, and the results of the
    latest preempted attempt once the runner wrote them (on SIGTERM) — taken while the Job is suspended,
    before a next attempt can write its own, and only results of a run not taken already."""
    stored = observation.status
    records: list[dict[str, Any]] = [dict(record) for record in stored.get("preemptions") or []]
    workload = observation.workload
    if workload is not None:
        while len(records) < min(workload.preemptions, _PREEMPTIONS_KEPT):
            records.append(
                {
                    "time": workload.preemption_time or when,
                    "attempt": int(stored.get("attempts") or 1),
                    "reason": workload.preemption_reason or Reason.PREEMPTED,
                    "message": (workload.preemption_message or "")[:_MESSAGE_LIMIT],
                }
            )
    job = observation.job
    results, run_id = stored.get("results"), stored.get("runId")
    taken = {record.get("runId") for record in records}
    if records and "results" not in records[-1] and results and run_id not in taken and job and job.suspended:
        records[-1] |= {"results": results, "runId": run_id}
    return records


def _fails_its_job(job: JobView, pod: PodView | None) -> bool:
    """A pod whose runner ended with an exit code the Job's pod failure policy fails the Job on (and so a JobSet):
    it fails next (a Job's FailureTarget, then Failed), and the benchmark ends now instead of saying for a moment
    that it retries."""
    return pod is not None and pod.phase == "Failed" and pod.exit_code in NOT_RETRIED_EXIT_CODES


def _pod_alive(pod: PodView | None) -> bool:
    """A pod being deleted still runs until its process ends: the runner writes its partial results then."""
    return pod is not None and pod.phase in ("Pending", "Running")


def _running_phase(
    observation: Observation, pod: PodView | None, reason: str | None, message: str | None
) -> tuple[Phase, str, str]:
    if pod is not None and pod.phase == "Succeeded":
        # The runner is done; the Job controller has not marked the Job complete yet.
        return Phase.RUNNING, reason or Reason.FINISHING, message or "the runner finished; the Job completes"
    if pod is not None and pod.phase == "Failed":
        # Between a failed pod and its replacement (spec.retries).
        return Phase.SCHEDULING, reason or Reason.RETRYING, message or f"pod {pod.name} failed; the Job starts another"
    if pod is None:
        return Phase.SCHEDULING, reason or Reason.SCHEDULING, message or "waiting for the Job's pod to be scheduled"
    if not pod.node_name:
        if pod.unschedulable_message:
            return Phase.SCHEDULING, Reason.UNSCHEDULABLE, pod.unschedulable_message
        return Phase.SCHEDULING, reason or Reason.SCHEDULING, message or "waiting for a node"
    if pod.waiting_reason in (*IMAGE_WAITING_REASONS, *CONTAINER_WAITING_REASONS):
        return Phase.SCHEDULING, pod.waiting_reason, pod.waiting_message or pod.waiting_reason
    if pod.phase != "Running":
        # On a node, its image pulled or its container created: not loading anything yet, and a pull that
        # fails next must not move the phase back.
        return (
            Phase.SCHEDULING,
            reason or Reason.STARTING,
            message or f"the pod's container is starting on {pod.node_name}",
        )
    progress = observation.status.get("progress") or {}
    if pod.phase == "Running" and progress.get("podName") == pod.name:
        return Phase.RUNNING, reason or Reason.RUNNING, message or "the engine is loaded and the benchmark runs"
    return (
        Phase.LOADING_ENGINE,
        reason or Reason.LOADING_ENGINE,
        message or f"the runner is loading the engine on {pod.node_name}",
    )


def _failure(job: JobView, pod: PodView | None) -> tuple[Phase, str, str]:
    if job.failed_reason == Reason.DEADLINE_EXCEEDED:
        return Phase.FAILED, Reason.DEADLINE_EXCEEDED, job.failed_message or "the benchmark ran past spec.timeout"
    told = _pod_failure(pod) if pod is not None else None
    if job.members > 1 and job.failed_member is not None and (pod is None or pod.member != job.failed_member):
        # The pod that failed first is gone (deleted, or evicted and removed): its Job's index still says which.
        because = f" ({job.failed_reason}: {job.failed_message})" if job.failed_message else ""
        return (
            Phase.FAILED,
            Reason.POD_FAILED,
            f"pod {job.failed_member} of {job.members} (its Job {job.name}-{REPLICATED_JOB}-{job.failed_member}) failed"
            f" and is gone, and its JobSet stopped the others{because}",
        )
    if job.members > 1 and pod is not None:
        # Which of the pods (and so which replicas) ended the benchmark; the others' runs were stopped with it.
        which = f"pod {pod.member} of {job.members} ({pod.name}{' on ' + pod.node_name if pod.node_name else ''})"
        if told is not None:
            return Phase.FAILED, told[0], f"{which}: {told[1]}"
        if pod.phase == "Failed" or pod.deleting:
            exit_code = f" with exit code {pod.exit_code}" if pod.exit_code is not None else ""
            ended = f"failed{exit_code}" if pod.phase == "Failed" else "was deleted"
            because = f" ({job.failed_reason}: {job.failed_message})" if job.failed_message else ""
            return Phase.FAILED, Reason.POD_FAILED, f"{which} {ended}, and its JobSet stopped the others{because}"
    if told is not None:
        return Phase.FAILED, *told
    return (
        Phase.FAILED,
        job.failed_reason or Reason.BACKOFF_LIMIT_EXCEEDED,
        job.failed_message or "the benchmark's pods failed",
    )


def _pod_failure(pod: PodView) -> tuple[str, str] | None:
    """Why a pod's runner ended, where its end says: the kernel's OOM kill, a refused configuration, the
    runner's own words; None where it says nothing."""
    told = _runner_message(pod.termination_message) if pod.termination_message else ""
    if pod.terminated_reason == Reason.OOM_KILLED:
        return Reason.OOM_KILLED, "the runner ran out of memory (raise spec.resources.limits.memory)"
    if pod.exit_code == EXIT_USAGE:
        return Reason.INVALID_CONFIG, told or "the runner refused its configuration"
    if pod.exit_code == EXIT_OUTPUT_FAILED:
        summary = parse_summary(pod.termination_message or "")
        failed = summary.output_failure if summary is not None else None
        return (
            Reason.OUTPUT_FAILED,
            f"the run ended and its results are in the status, but {failed or 'an output could not be written'}",
        )
    if pod.exit_code is not None and told:
        return Reason.ENGINE_ERROR, told
    return None


def _runner_message(text: str) -> str:
    """What the runner said when it failed: its summary's stop reason when it left a summary (a failed engine
    still writes its partial results), else the end of its log tail (FallbackToLogsOnError)."""
    summary = parse_summary(text)
    if summary is None:
        return _last_lines(text)
    stopped = [result.stop_reason for result in summary.results if result.stop_reason]
    reason = summary.stop_reason or (stopped[-1] if stopped else "")
    done = f" (the results of {len(summary.results)} benchmark(s) are kept)" if summary.results else ""
    return f"{reason}{done}" if reason else ""


def _last_lines(text: str, lines: int = 6) -> str:
    """The end of a log tail (FallbackToLogsOnError), where the runner's error is."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def _conditions(
    stored: Sequence[Mapping[str, Any]],
    phase: Phase,
    reason: str,
    message: str,
    pod: PodView | None,
    observation: Observation,
    when: str,
) -> list[dict[str, Any]]:
    previous = {condition.get("type"): condition for condition in stored}
    scheduled = phase in (Phase.LOADING_ENGINE, Phase.RUNNING, Phase.SUCCEEDED) or (
        pod is not None and bool(pod.node_name)
    )
    engine_loaded = phase in (Phase.RUNNING, Phase.SUCCEEDED) or bool(
        previous.get(ConditionType.ENGINE_LOADED, {}).get("status") == "True"
    )
    wanted: dict[ConditionType, tuple[Literal["True", "False", "Unknown"], str, str]] = {
        ConditionType.SCHEDULED: (
            ("True", Reason.SCHEDULED, f"pod {pod.name} runs on {pod.node_name}")
            if scheduled and pod is not None and pod.node_name
            else ("True", Reason.SCHEDULED, "the pod was scheduled")
            if scheduled
            else ("False", reason if reason == Reason.UNSCHEDULABLE else Reason.WAITING, message)
        ),
        ConditionType.ENGINE_LOADED: ("True", Reason.ENGINE_LOADED, "the runner loaded its engine")
        if engine_loaded
        else ("False", Reason.WAITING, "the engine is not loaded yet"),
        ConditionType.COMPLETE: ("True", Reason.COMPLETED, message)
        if phase == Phase.SUCCEEDED
        else ("False", phase, message),
        ConditionType.FAILED: ("True", reason, message) if phase == Phase.FAILED else ("False", Reason.NOT_FAILED, ""),
    }
    wanted[ConditionType.RETRYING] = _retrying(phase, observation)
    if observation.queued:
        wanted |= _queue_conditions(observation)
    if observation.baseline:
        wanted[ConditionType.REGRESSED] = _regressed(phase, observation)
    conditions = []
    kinds = [*CONDITION_TYPES, *(QUEUE_CONDITION_TYPES if observation.queued else ())]
    for kind in [*kinds, ConditionType.REGRESSED] if observation.baseline else kinds:
        status, why, text = wanted[kind]
        old = previous.get(kind) or {}
        transition = old.get("lastTransitionTime") if old.get("status") == status else None
        condition = Condition(
            type=kind,
            status=status,
            reason=why,
            message=text[:_MESSAGE_LIMIT],
            last_transition_time=transition or when,
            observed_generation=observation.generation,
        )
        conditions.append(condition.model_dump(by_alias=True, exclude_none=True))
    return conditions


def _regressed(phase: Phase, observation: Observation) -> tuple[Literal["True", "False", "Unknown"], str, str]:
    """The runner's verdict against spec.baseline (status.regression), once it wrote one."""
    written = observation.status.get("regression")
    try:
        verdict = RegressionStatus.model_validate(written) if written is not None else None
    except ValidationError:  # the status is writable by more than the runner: never crash on it
        verdict = None
    if verdict is None:
        if phase in FINISHED_PHASES:
            return "Unknown", Reason.NO_VERDICT, "the run ended without a verdict against its baseline"
        return "Unknown", Reason.WAITING, "judged against the baseline when the run ends"
    why = {"True": Reason.REGRESSED, "False": Reason.NOT_REGRESSED}.get(verdict.verdict, Reason.NO_VERDICT)
    return verdict.verdict, why, verdict.reason


def _retrying(phase: Phase, observation: Observation) -> tuple[Literal["True", "False"], str, str]:
    """True while a pod failed and the Job runs another (spec.retries), with why the latest one failed."""
    job = observation.job
    if job is None or not job.failed or phase in FINISHED_PHASES:
        return "False", Reason.NOT_RETRYING, ""
    failed = [pod for pod in observation.pods if pod.phase == "Failed" and not pod.deleting]
    latest = max(failed, key=lambda pod: (pod.created, pod.name)) if failed else None
    told = _pod_failure(latest) if latest is not None else None
    why: str
    if latest is None:
        why, detail = Reason.POD_FAILED, "a pod failed or was deleted"
    elif told is None:
        exit_code = f" (exit code {latest.exit_code})" if latest.exit_code is not None else ""
        why, detail = Reason.POD_FAILED, f"pod {latest.name} failed{exit_code}"
    else:
        why, detail = told[0], f"pod {latest.name}: {told[1]}"
    attempts = job.backoff_limit + 1
    return "True", why, f"{job.failed} of at most {attempts} attempts failed, the Job runs another; the last: {detail}"


def _queue_conditions(observation: Observation) -> dict[ConditionType, tuple[Literal["True", "False"], str, str]]:
    """Admitted: whether Kueue admitted the Job (else Kueue's reason for waiting); Preempted: whether Kueue
    ever preempted it, how often and why the last time."""
    workload, job = observation.workload, observation.job
    running = job is not None and not job.suspended
    admitted: tuple[Literal["True", "False"], str, str]
    if (workload is not None and workload.admitted) or running:
        admitted = ("True", Reason.ADMITTED, (workload.admitted_message if workload else "") or "admitted by Kueue")
    elif workload is None:
        admitted = ("False", Reason.PENDING, "waiting for Kueue to create the benchmark's Workload")
    else:
        admitted = ("False", workload.reason, _waiting_message(workload, observation.position))
    preempted: tuple[Literal["True", "False"], str, str] = ("False", Reason.NOT_PREEMPTED, "")
    if workload is not None and workload.preemptions:
        times = "once" if workload.preemptions == 1 else f"{workload.preemptions} times"
        latest = workload.preemption_message or "no message"
        preempted = (
            "True",
            workload.preemption_reason or Reason.PREEMPTED,
            f"preempted by Kueue {times}; last: {latest}",
        )
    return {ConditionType.ADMITTED: admitted, ConditionType.PREEMPTED: preempted}


def benchmark_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a BatchBenchmark's own changes can move its phase: the runner reporting (engine loaded, results),
    a new generation, cancel. Progress ticks and the operator's own status writes change none of it."""
    status = body.get("status") or {}
    return (
        (body.get("metadata") or {}).get("generation"),
        bool((body.get("spec") or {}).get("cancel")),
        status.get("phase") is None,
        (status.get("progress") or {}).get("podName"),
        status.get("runId"),
    )


def child_signature(kind: str, body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a Job's or pod's changes the status reads (JobView, PodView); other updates change no phase."""
    if kind == "Job":
        return (JobView.from_dict(body),)
    return (PodView.from_dict(body),)
