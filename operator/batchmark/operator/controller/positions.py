"""Queue positions of Queued benchmarks, from Kueue's visibility API (visibility.kueue.x-k8s.io).

Kueue reports where a pending Workload stands only through that API, which its manager serves as an aggregated
API server: ``.../namespaces/NS/localqueues/LQ/pendingworkloads`` lists a LocalQueue's pending Workloads with
``positionInLocalQueue`` and ``positionInClusterQueue`` (both from 0, the next one to be admitted). A position
changes without any event the operator watches (another Workload was admitted, or finished), so positions are
polled: ``QueuePositions.poll`` reads each LocalQueue that has a Queued benchmark once, and names the benchmarks
whose position moved, which the operator then refreshes. A refresh itself never calls the API: it reads the last
poll's answer. So the API is called once per LocalQueue per poll, whatever the number of benchmarks or events.

Where the API is absent or refuses (no visibility server, an older Kueue, no RBAC for it), benchmarks wait
without a position: the failure is logged once per LocalQueue, and that LocalQueue is asked again only after
``retry_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"
RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class QueuePosition:
    """Where a pending Workload stands, as Kueue reports it (0: the next to be admitted)."""

    local_queue: str
    position: int  # in its LocalQueue
    cluster_queue_position: int  # in the LocalQueue's ClusterQueue, among the Workloads of all its LocalQueues

    def status(self) -> dict[str, Any]:
        """``status.queue`` (batchmark.operator.resource.api.QueueStatus)."""
        return {
            "name": self.local_queue,
            "position": self.position,
            "clusterQueuePosition": self.cluster_queue_position,
        }

    def describe(self) -> str:
        return (
            f"position {self.position} in LocalQueue {self.local_queue}, {self.cluster_queue_position} in its"
            " ClusterQueue (0: next to be admitted)"
        )


def positions_in(summary: Mapping[str, Any], local_queue: str) -> dict[str, QueuePosition]:
    """A PendingWorkloadsSummary read into each pending Workload's position, by Workload name."""
    found: dict[str, QueuePosition] = {}
    for item in summary.get("items") or []:
        name = (item.get("metadata") or {}).get("name")
        if not name:
            continue
        found[str(name)] = QueuePosition(
            local_queue=local_queue,
            position=int(item.get("positionInLocalQueue") or 0),
            cluster_queue_position=int(item.get("positionInClusterQueue") or 0),
        )
    return found


@dataclass
class _Waiting:
    local_queue: str
    workload: str
    shown: QueuePosition | None  # what the benchmark's status was last built with


# A LocalQueue: (namespace, name). A benchmark: (namespace, name).
_Key = tuple[str, str]


class QueuePositions:
    """The positions of the Queued benchmarks, polled per LocalQueue; thread-safe.

    ``fetch(namespace, local_queue)`` returns the LocalQueue's PendingWorkloadsSummary (a dict), raising for an
    error (``ApiException``, a transport error).
    """

    def __init__(
        self,
        fetch: Callable[[str, str], Mapping[str, Any]],
        *,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[_Key, _Waiting] = {}
        self._known: dict[_Key, dict[str, QueuePosition]] = {}
        self._retry_at: dict[_Key, float] = {}  # LocalQueues whose last read failed: not asked before then

    def position(self, namespace: str, benchmark: str, local_queue: str, workload: str) -> QueuePosition | None:
        """The benchmark's position as last polled (None before the first poll that saw it), and follow it: the
        next polls read its LocalQueue. Its status is taken to show what this returns."""
        with self._lock:
            shown = self._known.get((namespace, local_queue), {}).get(workload)
            self._waiting[(namespace, benchmark)] = _Waiting(local_queue, workload, shown)
            return shown

    def forget(self, namespace: str, benchmark: str) -> None:
        """The benchmark no longer waits in a queue (admitted, finished, deleted): stop following it."""
        with self._lock:
            self._waiting.pop((namespace, benchmark), None)

    @property
    def following(self) -> int:
        with self._lock:
            return len(self._waiting)

    def poll(self) -> list[_Key]:
        """Read each LocalQueue a followed benchmark waits in, once; return the benchmarks whose position is not
        the one their status shows."""
        with self._lock:
            queues = {(namespace, waiting.local_queue) for (namespace, _), waiting in self._waiting.items()}
            for gone in set(self._known) - queues:
                del self._known[gone]
            now = self._clock()
            due = sorted(queue for queue in queues if self._retry_at.get(queue, 0.0) <= now)
        for queue in due:
            self._read(queue)
        with self._lock:
            return [
                benchmark
                for benchmark, waiting in self._waiting.items()
                if self._known.get((benchmark[0], waiting.local_queue), {}).get(waiting.workload) != waiting.shown
            ]

    def _read(self, queue: _Key) -> None:
        namespace, local_queue = queue
        try:
            summary = self._fetch(namespace, local_queue)
        except (ApiException, HTTPError, OSError, ValueError) as error:
            with self._lock:
                first = queue not in self._retry_at
                self._retry_at[queue] = self._clock() + self._retry_seconds
                self._known[queue] = {}  # a position that can no longer be read is not shown as if current
            if first:
                log.warning(
                    "queue positions of LocalQueue %s/%s unavailable (%s); its benchmarks wait without one, asked"
                    " again every %.0f s",
                    namespace,
                    local_queue,
                    _describe(error),
                    self._retry_seconds,
                )
            return
        with self._lock:
            if self._retry_at.pop(queue, None) is not None:
                log.info("queue positions of LocalQueue %s/%s available again", namespace, local_queue)
            self._known[queue] = positions_in(summary, local_queue)


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}".strip()
    return f"{type(error).__name__}: {error}"
