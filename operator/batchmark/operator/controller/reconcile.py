"""What the operator does, as plain functions over typed inputs (handlers.py wires them to kopf, through dispatch.py).

- ``ensure``: on create and on resume: validate what the schema cannot, then create the children
  idempotently (deterministic names; a 409 means it exists, so a restarted operator makes no second Job).
- ``refresh``: read the resource, its Job and pods, let ``status.build_status`` decide, patch what changed,
  record an event for each transition; copy results from the termination message when the runner could not.
- ``cancel``: suspend the Job, so its pod gets SIGTERM and the runner writes its partial results (a Job
  queued through Kueue: deactivate its Workload instead, and Kueue suspends the Job).

A benchmark with ``spec.queueName`` is refused where Kueue is not installed or its LocalQueue does not exist;
otherwise its Job is created suspended for Kueue to admit (``kueue``), and Kueue's Workload is read into the
status with the Job, and, while it waits, its position in the queue (``positions``: polled, not read per refresh).
- ``forget``: the resource is deleted (its children go by owner reference); drop its metrics.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from batchmark.operator.controller import children, kueue
from batchmark.operator.controller.deadlines import Deadlines
from batchmark.operator.controller.jobset import JOBSET_API_VERSION, MAX_JOBSET_NAME, REPLICATED_JOB
from batchmark.operator.controller.kube import Kube, KueueApi
from batchmark.operator.controller.kueue import WorkloadView
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.positions import QueuePosition, QueuePositions
from batchmark.operator.controller.status import JobView, Observation, PodView, StatusUpdate, build_status
from batchmark.operator.controller.watched import ApiChildren, Children
from batchmark.operator.controller.workers import ControllerThreads
from batchmark.operator.resource.api import (
    BatchBenchmarkSpec,
    OperatorDefaults,
    Parallelism,
    StartBounds,
    StartTimeouts,
)
from batchmark.operator.resource.status import FINISHED_PHASES, Phase, Reason
from batchmark.runner.contract import OPERATOR_FALLBACK_FIELDS, OPERATOR_STATUS_FIELDS, check_status_writes
from batchmark.runner.statusfields import headline, parse_summary

log = logging.getLogger(__name__)

# The event recorded when the phase becomes this one: (type, reason).
_TRANSITION_EVENTS: dict[Phase, list[tuple[str, Reason]]] = {
    Phase.QUEUED: [("Normal", Reason.QUEUED)],
    Phase.LOADING_ENGINE: [("Normal", Reason.SCHEDULED)],
    Phase.RUNNING: [("Normal", Reason.ENGINE_LOADED), ("Normal", Reason.RUNNING)],
    Phase.SUCCEEDED: [("Normal", Reason.COMPLETED)],
    Phase.FAILED: [("Warning", Reason.FAILED)],
    Phase.CANCELLED: [("Normal", Reason.CANCELLED)],
}


class Reconciler:
    """The operator's state: its API access, its defaults, its metrics; the threads and locks it is handed."""

    def __init__(
        self,
        kube: Kube,
        threads: ControllerThreads,
        defaults: OperatorDefaults | None = None,
        metrics: OperatorMetrics | None = None,
    ):
        self.kube = kube
        self.threads = threads
        self.kueue = KueueApi(kube.api)
        # Where the Job, pods and Workload are read: kopf's indices once the handlers bind them (dispatch.py).
        self.api_children = ApiChildren(kube, self.kueue)
        self.children: Children = self.api_children
        self.positions = QueuePositions(self.kueue.pending_workloads)
        self.defaults = defaults or OperatorDefaults()
        self.metrics = metrics or OperatorMetrics()
        # Each benchmark's next start bound, for the dispatch's clock to refresh it then (deadlines.py).
        self.deadlines = Deadlines()

    def ensure(self, body: Mapping[str, Any]) -> None:
        metadata = body["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        status = body.get("status") or {}
        if status.get("phase") in FINISHED_PHASES:
            return
        owner = children.Owner(namespace, name, metadata["uid"])
        try:
            spec = self.defaults.apply(BatchBenchmarkSpec.model_validate(body.get("spec") or {}))
            config = spec.run_config(name)
            self._check_jobset(spec, name)
            priority_class = self._workload_priority_class(spec, namespace)
            job = children.workload(owner, spec, priority_class, self.defaults.security_context)
        except (ValidationError, ValueError) as error:
            self.refresh(namespace, name, invalid=_describe(error))
            return
        except QueueRefused as refusal:
            self.refresh(namespace, name, invalid=refusal.message, invalid_reason=refusal.reason)
            return
        if spec.cancel and self._job(namespace, name, owner.uid, spec.pods) is None:
            self.refresh(namespace, name)
            return
        # The calls go in two rounds, each made at once, not nine in a row (with 200 benchmarks applied together
        # that made the last Job wait seconds): the Pending status (from the body just received: no one else
        # writes the status of a benchmark without a Job), the children that need nothing and the Job; then the
        # RoleBinding, which needs its Role (the operator holds no `bind` permission, so the API server checks
        # the Role's rules), beside the status that says the Job exists. The Job does not wait for its
        # ServiceAccount: the Job controller creates its pods only once it has seen the Job, and retries a pod
        # refused for want of its account; the runner needs its RoleBinding only once it runs.
        # The lock is held from before the Job exists to the status that says so: the Job's and pod's events
        # wait, so the phases are written in the order they happened (Scheduling before LoadingEngine); the
        # Pending refresh runs under this thread's hold.
        with self.threads.locks.held(namespace, name):
            pending = (
                self.threads.aside(lambda: self.refresh(namespace, name, body=body, lock_held=True))
                if not status.get("phase")
                else None
            )
            try:
                *_, created = self._create_at_once(
                    children.config_map(owner, config),
                    children.service_account(owner),
                    children.role(owner),
                    job,
                )
                binding = self.threads.aside(lambda: self.kube.create(children.role_binding(owner)))
                if pending is not None:
                    pending.result()  # Pending is written before the Job's status can be
                # A Job this call created has no pod yet: the benchmark is Scheduling now, whatever comes next.
                self.refresh(namespace, name, created_job=job if created else None)
                binding.result()
            except ApiException as error:
                # 422 is the answer of admission (a policy such as the chart's, which keeps the operator's writes
                # out of protected namespaces) and of validation: the same objects would be refused every time, so
                # the benchmark ends here instead of being retried for ever.
                if error.status != HTTPStatus.UNPROCESSABLE_ENTITY:
                    raise
                if pending is not None:
                    pending.result()  # Pending first, so that it never follows Failed
                refused = f"the API server refused the benchmark's objects: {_api_message(error)}"
                self.refresh(namespace, name, invalid=refused, invalid_reason=Reason.ADMISSION_REFUSED)

    def _check_jobset(self, spec: BatchBenchmarkSpec, name: str) -> None:
        """A benchmark over several pods needs JobSet's API, and a name its Jobs' names can carry."""
        if spec.pods == 1:
            return
        if len(name) > MAX_JOBSET_NAME:
            raise ValueError(
                f"spec.parallelism: a benchmark over several pods ({spec.pods}) is a JobSet whose Jobs are named"
                f" <name>-{REPLICATED_JOB}-<index>; its name may be {MAX_JOBSET_NAME} characters at most, not"
                f" {len(name)}"
            )
        if not self.kube.jobset_served():
            raise ValueError(
                f"spec.parallelism: {spec.parallelism.replicas if spec.parallelism else 1} replicas over"
                f" {spec.pods} pods run as a JobSet ({JOBSET_API_VERSION}), which this cluster does not serve;"
                " install JobSet, or run every replica in one pod (replicasPerPod equal to replicas)"
            )

    def _job(self, namespace: str, name: str, uid: str, pods: int) -> JobView | None:
        """The benchmark's Job, or its JobSet above one pod (read from the API server: it has no index)."""
        if pods == 1:
            return self.children.job(namespace, name, uid)
        found = self.kube.get_jobset(namespace, name)  # None also where JobSet's API is not served (404)
        view = JobView.from_jobset(found) if found is not None else None
        return view if view is not None and view.owner_uid == uid else None

    def _create_at_once(self, *manifests: Mapping[str, Any]) -> list[bool]:
        """Create the objects concurrently; for each, whether this call created it (False: it existed)."""
        return self.threads.at_once(self.kube.create, manifests)

    def _workload_priority_class(self, spec: BatchBenchmarkSpec, namespace: str) -> str | None:
        """For a queued benchmark: check Kueue and the LocalQueue are there, and return the
        WorkloadPriorityClass named like spec.priorityClassName when one exists."""
        if spec.queue_name is None:
            return None
        if not self.kueue.installed():
            raise QueueRefused(
                Reason.KUEUE_NOT_INSTALLED,
                f"spec.queueName is {spec.queue_name!r} but Kueue is not installed in this cluster (no"
                f" {kueue.KUEUE_GROUP}/{kueue.KUEUE_VERSION} API); install Kueue or remove queueName",
            )
        if not self.children.local_queue_exists(namespace, spec.queue_name):
            raise QueueRefused(
                Reason.LOCAL_QUEUE_NOT_FOUND,
                f"spec.queueName: LocalQueue {spec.queue_name!r} does not exist in namespace {namespace!r};"
                " create it (see examples/kueue/queues.yaml) or name an existing one",
            )
        name = spec.priority_class_name
        return name if name is not None and self.kueue.priority_class_exists(name) else None

    def refresh(
        self,
        namespace: str,
        name: str,
        invalid: str | None = None,
        extra: Mapping[str, Any] | None = None,
        created_job: Mapping[str, Any] | None = None,
        invalid_reason: Reason = Reason.INVALID_CONFIG,
        body: Mapping[str, Any] | None = None,
        lock_held: bool = False,
    ) -> StatusUpdate | None:
        """Build the status from what is observed now and patch what changed; ``created_job``: the manifest
        of the Job the caller has just created (no watch has seen it yet, and it has no pod); ``body``: the
        resource as just received, instead of reading it again; ``lock_held``: the benchmark's lock is held for
        this call by the thread waiting for it (``ensure``)."""
        with contextlib.nullcontext() if lock_held else self.threads.locks.held(namespace, name):
            if body is None:
                body = self.kube.get_benchmark(namespace, name)
            if body is None:
                return None
            stored: dict[str, Any] = body.get("status") or {}
            uid = str(body["metadata"].get("uid") or "")
            spec = body.get("spec") or {}
            members = _pods_of(spec)
            job = self._job(namespace, name, uid, members)
            if job is None and created_job is not None:
                job = JobView.from_jobset(created_job) if members > 1 else JobView.from_dict(created_job)
            pods = self.children.pods(namespace, name) if job and created_job is None else []
            # Pods of a previous benchmark's Job of the same name carry the same label: only this Job's count.
            pods = [pod for pod in pods if job is not None and job.owns(pod)]
            queued = job is not None and job.queued
            workload = self.children.workload(namespace, job.uid) if job and queued and job.uid else None
            cancel = bool(spec.get("cancel"))
            if cancel and workload is not None and workload.active:
                self.kueue.deactivate(namespace, workload.name)
            position = self._position(namespace, name, job, workload, cancel)
            observation = Observation(
                generation=int(body["metadata"].get("generation") or 1),
                cancel=cancel,
                status=stored,
                job=job,
                pods=pods,
                invalid=invalid if stored.get("phase") is None or stored.get("phase") == Phase.PENDING else None,
                invalid_reason=invalid_reason,
                queued=queued,
                workload=workload,
                position=position,
                bounds=self._bounds(spec),
                replicas=_replicas_of(spec),
                baseline=bool(spec.get("baseline")),
            )
            update = build_status(observation)
            if update.stalled and job is not None:
                # Before the status says Failed: a pod that got a node after all must not run for nothing.
                self._stop(namespace, name, job, workload)
            fields = {**update.fields, **(extra or {})}
            check_status_writes("operator", fields, OPERATOR_STATUS_FIELDS)
            # One pod's summary is never a benchmark over several pods' result: its pod 0 writes theirs, merged.
            if update.phase in FINISHED_PHASES and not stored.get("results") and members == 1:
                fallback = _results_from_termination_messages(pods)
                check_status_writes("operator", fallback, OPERATOR_FALLBACK_FIELDS)
                fields.update(fallback)
            changed = {key: value for key, value in fields.items() if stored.get(key) != value}
            if changed:
                self.kube.patch_status(namespace, name, changed)
            self._announce(body, update)
            self._announce_preemption(body, stored, fields)
            self.metrics.set_phase(namespace, name, update.phase)
            self.metrics.set_starting(namespace, name, update.starting)
            self.deadlines.set(namespace, name, _next_look(update, members))
            completion_time = fields.get("completionTime") or stored.get("completionTime")
            if update.phase == Phase.FAILED and completion_time:
                self.metrics.set_failure(namespace, name, update.reason, completion_time)
            results = fields.get("results") or stored.get("results")
            if update.phase == Phase.SUCCEEDED or (update.phase in FINISHED_PHASES and results):
                self.metrics.set_results(namespace, name, body.get("spec") or {}, results or [])
                self.metrics.set_regression(namespace, name, stored.get("regression"))
            return update

    def _bounds(self, spec: Mapping[str, Any]) -> StartBounds:
        """The benchmark's start bounds: its spec.timeouts over the defaults. A spec.timeouts the API server's
        schema let through but the model refuses was refused by name at creation (InvalidConfig): the
        defaults bound it meanwhile."""
        try:
            given = StartTimeouts.model_validate(spec.get("timeouts") or {})
        except ValidationError:
            given = None
        return self.defaults.bounds(given)

    def _stop(self, namespace: str, name: str, job: JobView, workload: WorkloadView | None) -> None:
        """Stop the Job of a benchmark that a start bound ended, as a cancel does: through Kueue when Kueue
        manages it (it would resume a Job suspended under an admitted Workload), else by suspending it."""
        if job.queued and workload is not None:
            self.kueue.deactivate(namespace, workload.name)
        elif not job.suspended and job.members > 1:
            self.kube.suspend_jobset(namespace, name)
        elif not job.suspended:
            self.kube.suspend_job(namespace, name)

    def _position(
        self, namespace: str, name: str, job: JobView | None, workload: WorkloadView | None, cancel: bool
    ) -> QueuePosition | None:
        """Where the benchmark waits in its LocalQueue (as last polled), while Kueue has not admitted it."""
        queue = job.queue_name if job is not None and job.suspended and not cancel else None
        if queue is None or workload is None or not workload.active or workload.admitted:
            self.positions.forget(namespace, name)
            return None
        return self.positions.position(namespace, name, queue, workload.name)

    def cancel(self, namespace: str, name: str) -> None:
        """Stop the benchmark, keeping its Job (and the results its pod writes on SIGTERM).

        A Job that Kueue manages is stopped through Kueue: ``refresh`` deactivates its Workload (also one Kueue
        makes only later), and Kueue evicts it and suspends the Job itself. Suspending it here as well would race
        with Kueue, which resumes a suspended Job whose Workload is still admitted: a new pod would start, and be
        stopped again while its engine loads, writing empty results over the cancelled run's."""
        body = self.kube.get_benchmark(namespace, name)
        if body is not None and _pods_of(body.get("spec") or {}) > 1:
            jobset = self.kube.get_jobset(namespace, name)
            if jobset is not None and kueue.QUEUE_NAME_LABEL not in (jobset["metadata"].get("labels") or {}):
                self.kube.suspend_jobset(namespace, name)
        else:
            job = self.kube.get_job(namespace, name)
            if job is not None and kueue.QUEUE_NAME_LABEL not in (job["metadata"].get("labels") or {}):
                self.kube.suspend_job(namespace, name)
        self.refresh(namespace, name)  # the resource read again, under its lock: another refresh may have moved it

    def forget(self, namespace: str, name: str) -> None:
        self.metrics.forget(namespace, name)
        self.positions.forget(namespace, name)
        self.deadlines.forget(namespace, name)
        self.threads.locks.forget(namespace, name)

    def _announce(self, body: Mapping[str, Any], update: StatusUpdate) -> None:
        previous_reason = (body.get("status") or {}).get("reason")
        events: list[tuple[str, str, str]] = []
        if update.changed_phase:
            for kind, announced in _TRANSITION_EVENTS.get(update.phase, []):
                message = update.message if announced != Reason.FAILED else f"{update.reason}: {update.message}"
                events.append((kind, announced, message))
        if update.reason != previous_reason and update.warning and update.phase not in FINISHED_PHASES:
            events.append(("Warning", update.reason, update.message))
        for kind, reason, message in events:
            try:
                self.kube.event(body, kind, reason, message)
            except Exception as error:  # an event is a courtesy: never fail the reconcile on one
                log.warning("could not record event %s on %s: %s", reason, body["metadata"]["name"], error)

    def _announce_preemption(
        self, body: Mapping[str, Any], stored: Mapping[str, Any], fields: Mapping[str, Any]
    ) -> None:
        """A Warning event for each preemption newly recorded in the status."""
        before = len(stored.get("preemptions") or [])
        for record in (fields.get("preemptions") or [])[before:]:
            message = f"Kueue preempted attempt {record['attempt']} ({record['reason']}): {record['message']}"
            try:
                self.kube.event(body, "Warning", Reason.PREEMPTED, message + "; it waits in its queue to run again")
            except Exception as error:  # an event is a courtesy: never fail the reconcile on one
                log.warning("could not record event Preempted on %s: %s", body["metadata"]["name"], error)


class QueueRefused(Exception):
    """A queued benchmark that cannot be queued: Kueue or its LocalQueue is missing."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# How often a benchmark over several pods is looked at while it runs: no watch follows its JobSet (the operator
# may start before JobSet is installed), and the JobSet's end comes after its pods' last event.
JOBSET_LOOK_SECONDS = 2.0


def _next_look(update: StatusUpdate, members: int) -> datetime.datetime | None:
    """When the benchmark's status is to be built again: its start bound's deadline, and for a JobSet's benchmark
    that has not finished, within JOBSET_LOOK_SECONDS."""
    if members == 1 or update.phase in FINISHED_PHASES:
        return update.deadline
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=JOBSET_LOOK_SECONDS)
    return min(soon, update.deadline) if update.deadline is not None else soon


def _replicas_of(spec: Mapping[str, Any]) -> int | None:
    """The engine replicas a stored spec measures at once, as it says them (None where it says nonsense)."""
    replicas = (spec.get("parallelism") or {}).get("replicas") or (spec.get("backend") or {}).get("replicas") or 1
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None


def _pods_of(spec: Mapping[str, Any]) -> int:
    """The pods a stored spec runs in at once (its JobSet's, above 1); 1 for a spec the model would refuse."""
    try:
        return Parallelism.model_validate(spec.get("parallelism") or {}).pods
    except ValidationError:
        return 1


def _results_from_termination_messages(pods: list[PodView]) -> dict[str, Any]:
    """The runner's summary from the newest pod that left one: results that survived an unreachable API."""
    for pod in sorted(pods, key=lambda each: each.created, reverse=True):
        summary = parse_summary(pod.termination_message or "")
        if summary is None:
            continue
        results = [entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in summary.results]
        fields: dict[str, Any] = {"results": results, "runId": summary.run_id}
        if summary.engine is not None:
            fields["engine"] = summary.engine.model_dump(mode="json", by_alias=True, exclude_none=True)
        best = headline(summary)
        if best is not None:
            fields["headline"] = best.model_dump(mode="json", by_alias=True, exclude_none=True)
        return fields
    return {}


def _api_message(error: ApiException) -> str:
    """The message of the API server's Status answer, or the error as it prints."""
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else str(error).strip()


def _describe(error: Exception) -> str:
    if isinstance(error, ValidationError):
        problems = []
        for problem in error.errors():
            location = ".".join(str(part) for part in problem["loc"])
            problems.append(f"spec.{location}: {problem['msg']}" if location else problem["msg"])
        return "; ".join(problems)
    return str(error)
