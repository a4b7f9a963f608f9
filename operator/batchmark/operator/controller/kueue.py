"""Queueing through Kueue (kueue.x-k8s.io/v1beta2): the labels a queued benchmark's Job carries, the checks
before it is created, and what Kueue's Workload for the Job says, read into the operator's terms.

Kueue manages a Job created suspended with the queue-name label: it creates a Workload owned by the Job
(labelled with the Job's uid), admits it against its ClusterQueue's quota by unsuspending the Job, and when it
preempts it, suspends the Job again (its pod gets SIGTERM) and requeues the Workload. The calls to Kueue's
API are in batchmark.operator.controller.kube (KueueApi); everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


@dataclass(frozen=True)
class WorkloadView:
    """What the status needs of the Workload Kueue made for a benchmark's Job."""

    name: str
    active: bool = True  # spec.active: false once deactivated (a cancelled benchmark), and Kueue evicts it
    admitted: bool = False
    # While not admitted: Kueue's reason (Pending, Inadmissible, Preempted, ...) and message, e.g. "couldn't
    # assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpus, 1 more needed".
    reason: str = "Pending"
    message: str = ""
    admitted_message: str = ""
    preemptions: int = 0  # times Kueue preempted it (each ends an attempt)
    preemption_reason: str | None = None  # of the latest: InClusterQueue, InCohortReclamation, ...
    preemption_message: str | None = None
    preemption_time: str | None = None

    @classmethod
    def from_dict(cls, workload: Mapping[str, Any]) -> WorkloadView:
        status = workload.get("status") or {}
        conditions = {entry.get("type"): entry for entry in status.get("conditions") or []}
        admitted = conditions.get("Admitted") or {}
        reserved = conditions.get("QuotaReserved") or {}
        evicted = conditions.get("Evicted") or {}
        preempted = conditions.get("Preempted") or {}
        evictions: Sequence[Mapping[str, Any]] = (status.get("schedulingStats") or {}).get("evictions") or []
        preemptions = sum(int(entry.get("count") or 0) for entry in evictions if entry.get("reason") == "Preempted")
        # Why it is not admitted: an eviction under way says why it lost its quota; otherwise QuotaReserved=False
        # carries the scheduler's reason; a Workload Kueue has not looked at yet has neither.
        why = evicted if evicted.get("status") == "True" else reserved
        return cls(
            name=str((workload.get("metadata") or {}).get("name", "")),
            active=bool((workload.get("spec") or {}).get("active", True)),
            admitted=admitted.get("status") == "True",
            reason=str(why.get("reason") or "Pending"),
            message=str(why.get("message") or "waiting for Kueue to consider the Workload"),
            admitted_message=str(admitted.get("message") or ""),
            preemptions=preemptions,
            preemption_reason=str(preempted["reason"]) if preempted.get("reason") and preemptions else None,
            preemption_message=str(preempted.get("message") or "") if preemptions else None,
            preemption_time=str(preempted.get("lastTransitionTime") or "") if preemptions else None,
        )


def job_labels(queue_name: str, priority_class: str | None) -> dict[str, str]:
    """The labels that put a (suspended) Job into a LocalQueue, with its WorkloadPriorityClass if any."""
    labels = {QUEUE_NAME_LABEL: queue_name}
    if priority_class is not None:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    return labels
