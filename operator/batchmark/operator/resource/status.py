"""The words a BatchBenchmark's status is written in: its phases, the reasons for them and its condition types.

Their values are the API: ``kubectl wait --for=condition=Complete``, ``kubectl get bb`` and the chart's alerts
read them, and the CRD lists the phases. Reasons that come from elsewhere (a Job's failure reason, Kueue's
reason for waiting) pass through as plain strings; the ones the operator names itself are here.
"""

from __future__ import annotations

from enum import StrEnum


# Where a benchmark is: Pending -> (Queued) -> Scheduling -> LoadingEngine -> Running -> Succeeded, Failed or
# Cancelled. No docstring: pydantic would copy it into status.phase's schema and reorder the CRD's keys.
class Phase(StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    SCHEDULING = "Scheduling"
    LOADING_ENGINE = "LoadingEngine"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


FINISHED_PHASES: frozenset[Phase] = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})


class Reason(StrEnum):
    """Why the phase or a condition is what it is, one CamelCase word (also the reasons of its events)."""

    CREATED = "Created"
    PENDING = "Pending"
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"
    NOT_PREEMPTED = "NotPreempted"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    WAITING = "Waiting"
    STARTING = "Starting"
    LOADING_ENGINE = "LoadingEngine"
    ENGINE_LOADED = "EngineLoaded"
    RUNNING = "Running"
    FINISHING = "Finishing"
    RETRYING = "Retrying"
    NOT_RETRYING = "NotRetrying"
    POD_FAILED = "PodFailed"
    POD_NOT_CREATED = "PodNotCreated"
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"
    COMPLETED = "Completed"
    FAILED = "Failed"
    NOT_FAILED = "NotFailed"
    INVALID_CONFIG = "InvalidConfig"
    # The API server's admission (e.g. the chart's policy on what the operator writes) refused a child object.
    ADMISSION_REFUSED = "AdmissionRefused"
    KUEUE_NOT_INSTALLED = "KueueNotInstalled"
    LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
    ENGINE_ERROR = "EngineError"
    # The run ended and its results are in the status, but what was to keep them elsewhere (the results store)
    # could not be written.
    OUTPUT_FAILED = "OutputFailed"
    # The kubelet's and the Job controller's own words, which the status passes on as its reason.
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    ERR_IMAGE_PULL = "ErrImagePull"
    ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
    INVALID_IMAGE_NAME = "InvalidImageName"
    CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    CREATE_CONTAINER_ERROR = "CreateContainerError"
    OOM_KILLED = "OOMKilled"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    # The Regressed condition's (spec.baseline): the runner's verdict against the baseline.
    REGRESSED = "Regressed"
    NOT_REGRESSED = "NotRegressed"
    NO_VERDICT = "NoVerdict"


class ConditionType(StrEnum):
    """The conditions every benchmark has; Admitted and Preempted only one queued through Kueue, Regressed only
    one with a baseline."""

    SCHEDULED = "Scheduled"
    ENGINE_LOADED = "EngineLoaded"
    COMPLETE = "Complete"
    FAILED = "Failed"
    RETRYING = "Retrying"
    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"
    REGRESSED = "Regressed"
