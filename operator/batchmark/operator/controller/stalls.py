"""When a benchmark whose pod never starts ends: its start bounds (spec.timeouts, else the operator's defaults).

A pod can wait for ever with nothing failing: no node fits it (Unschedulable), the node cannot get its image
(ImagePullBackOff), the kubelet cannot create its container (CreateContainerConfigError: a root image under
runAsNonRoot, a Secret key that is not there). Each of these waits has its bound, counted from a time Kubernetes
recorded, so that an operator restart neither restarts the clock nor loses it: the pod's creation (waiting for
a node), its scheduling (its image, its container), the Job's start while it has no pod. A Job that waits in
Kueue is suspended and has no pod, and its startTime is set when Kueue admits it: time queued never counts.

Pure functions over the views of controller.status, which decides the phase with them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING

from batchmark.operator.resource.api import StartBounds
from batchmark.operator.resource.status import Reason

if TYPE_CHECKING:
    from batchmark.operator.controller.status import JobView, PodView

# The kubelet's waiting reasons for an image the node cannot get (ErrImageNeverPull: absent, and imagePullPolicy
# Never), and for a container it cannot create.
IMAGE_WAITING_REASONS = (
    Reason.IMAGE_PULL_BACK_OFF,
    Reason.ERR_IMAGE_PULL,
    Reason.ERR_IMAGE_NEVER_PULL,
    Reason.INVALID_IMAGE_NAME,
)
CONTAINER_WAITING_REASONS = (Reason.CREATE_CONTAINER_CONFIG_ERROR, Reason.CREATE_CONTAINER_ERROR)


@dataclass(frozen=True)
class Stall:
    """A pod that has not started, why (the kubelet's or the scheduler's reason and words), since when, and the
    bound it has (``timeout``: the field of spec.timeouts that gives it)."""

    reason: str
    message: str
    since: datetime.datetime
    seconds: int
    timeout: str

    @property
    def deadline(self) -> datetime.datetime:
        return self.since + datetime.timedelta(seconds=self.seconds)

    def passed(self, now: datetime.datetime) -> bool:
        return now >= self.deadline

    def failure_message(self) -> str:
        """The Failed status's message: the kubelet's words first (a long one is cut at the end, the bound is
        short), after the bound that ended it."""
        return f"not started within spec.timeouts.{self.timeout} ({self.seconds} s): {self.message}"


def stall(job: JobView, pod: PodView | None, bounds: StartBounds) -> Stall | None:
    """What keeps the Job's current pod (the newest) from starting, with its bound; None when it is not waiting
    (running, finished, being deleted, or in the Job's back-off between a failed pod and the next)."""
    if job.suspended:
        return None  # queued in Kueue, preempted or cancelled: no pod is meant to run
    if pod is None:
        # Only a Job that never had a pod: after one, a missing pod is the Job's back-off between attempts (or
        # one the index has not seen yet), which spec.retries bounds.
        started = parse_time(job.started)
        if started is None or job.active or job.failed or job.succeeded:
            return None
        message = "the Job created no pod: its events say why (an admission policy or a quota may refuse it)"
        return Stall(Reason.POD_NOT_CREATED, message, started, bounds.pending, "pending")
    if pod.deleting or pod.phase != "Pending":
        return None
    created = parse_time(pod.created)
    if not pod.node_name:
        if created is None:
            return None
        message = pod.unschedulable_message or "no node has taken the pod"
        return Stall(Reason.UNSCHEDULABLE, message, created, bounds.pending, "pending")
    scheduled = parse_time(pod.scheduled_at) or created
    if scheduled is None:
        return None
    waiting = pod.waiting_reason or ""
    message = pod.waiting_message or waiting
    if waiting in IMAGE_WAITING_REASONS:
        return Stall(waiting, message, scheduled, bounds.image_pull, "imagePull")
    if waiting in CONTAINER_WAITING_REASONS:
        return Stall(waiting, message, scheduled, bounds.container_create, "containerCreate")
    return None  # pulling, creating: progress, which spec.timeout bounds


def parse_time(text: str | None) -> datetime.datetime | None:
    """An RFC 3339 time as the API server writes them; None for none or for one that does not read as a time
    (the views come from objects others write)."""
    if not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)
