"""Which events refresh which benchmark, how urgently, on which thread: the logic behind kopf's handlers.

handlers.py holds kopf's decorators and hands every call to a ``Dispatch`` found in kopf's operator memo; what
it decides is here, in plain classes that the unit tests drive directly, without kopf:

- ``timed``: every reconcile is counted and timed by outcome; an API server that failed becomes ``RetryLater``,
  which handlers.py hands to kopf as its ``TemporaryError``, so kopf tries the handler again.
- ``Refresher``: the benchmarks' Jobs, pods and Workloads are kept in kopf's indices (``watched``)
  and their events are handled in kopf's event loop, so an event that changes nothing the status reads costs no
  thread, and a refresh is handed to a worker thread only when none is already waiting for that benchmark (the
  waiting one reads the state after this event too). With hundreds of benchmarks, every runner's progress patch
  and every pod update is an event: queued one thread-pool job each, they delayed the ones that matter.
  Refreshes have threads of their own (``workers``), apart from kopf's, which run the create handlers: when
  hundreds of benchmarks are applied at once, their creations (a dozen calls each) would otherwise hold every
  thread. A refresh after a Job finished goes before the routine ones: a benchmark that finished is marked so
  without waiting for every pod and runner update queued before it.
- ``QueuePositionPoller``: queue positions change with no event on a benchmark (another one was admitted): one
  task polls them (``positions``) and refreshes only the benchmarks whose position moved, at a bounded rate.
- ``DeadlinePoller`` (``deadlines``): a pod that waits to start may see no event at all; each benchmark's start
  bound is a time at which it is refreshed anyway, so that the bound ends it.
- ``SeenSignatures``: what the status last read of each object, so that events that change none of it cost
  nothing.
- ``Dispatch``: the routing of each kind of event to the above and to the Reconciler; it points the Reconciler
  at kopf's indices once, when kopf starts it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from batchmark.operator.controller import kueue
from batchmark.operator.controller.deadlines import DeadlinePoller, Deadlines
from batchmark.operator.controller.kube import ForeignChild
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.positions import QueuePositions
from batchmark.operator.controller.status import JobView, benchmark_signature, child_signature
from batchmark.operator.controller.watched import (
    BENCHMARK_LABEL,
    ApiChildren,
    Children,
    IndexedChildren,
    benchmark_job_of,
)
from batchmark.operator.controller.workers import ROUTINE, URGENT, ControllerThreads, PriorityWorkers, retried

RETRY_DELAY_SECONDS = 2.0
REFRESH_ATTEMPTS = 5  # a refresh the API server fails is tried again, 2, 4, 6 and 8 s later
# How often the positions of Queued benchmarks are read at most: one call per LocalQueue each time.
QUEUE_POSITION_SECONDS = 5.0
# Each benchmark whose position moved costs a refresh (a GET and a status patch), and when the head of a long
# queue is admitted every benchmark behind it moves: the polls are spaced so that these refreshes average at
# most this many per second (a queue of 200 sees its positions every 40 s), and run at most this many at once,
# so that the refreshes events ask for (admissions, finished pods) still find worker threads.
POSITION_REFRESHES_PER_SECOND = 5.0
POSITION_REFRESHES_AT_ONCE = 2

log = logging.getLogger(__name__)


class RetryLater(Exception):
    """The API server failed a reconcile: the handler is to be tried again ``delay`` seconds later."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


def timed(metrics: OperatorMetrics, action: Callable[[], Any]) -> None:
    """Run one reconcile, counted and timed by its outcome; an API server that failed is kopf's to retry."""
    started = time.perf_counter()
    outcome = "success"
    try:
        action()
    except (ApiException, HTTPError, OSError, ForeignChild) as error:
        outcome = "retry"
        raise RetryLater(f"API server: {error}", delay=RETRY_DELAY_SECONDS) from error
    except Exception:
        outcome = "error"
        raise
    finally:
        metrics.observe_reconcile(outcome, time.perf_counter() - started)


class Reconciles(Protocol):
    """What the dispatch asks of the Reconciler (batchmark.operator.controller.reconcile)."""

    metrics: OperatorMetrics
    positions: QueuePositions
    api_children: ApiChildren
    children: Children
    deadlines: Deadlines

    def ensure(self, body: Mapping[str, Any]) -> None: ...

    def refresh(self, namespace: str, name: str) -> Any: ...

    def cancel(self, namespace: str, name: str) -> None: ...

    def forget(self, namespace: str, name: str) -> None: ...


class SeenSignatures:
    """Of each object, what the status last read of it: an event that changes none of that is dropped.

    Every progress patch of every runner, and every status write of the operator itself, is an event: most
    change nothing a phase depends on, and skipping them keeps the operator quick with many benchmarks.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, ...], Hashable] = {}
        self._lock = threading.Lock()

    def changed(self, key: tuple[str, ...], signature: Hashable | None) -> bool:
        """False when the object changed in nothing the status reads since it was last seen (None: forget it)."""
        with self._lock:
            if signature is None:
                self._seen.pop(key, None)
                return True
            if self._seen.get(key) == signature:
                return False
            self._seen[key] = signature
            return True


class Refresher:
    """Refreshes on worker threads, most urgent first; at most one waits per benchmark, at its most urgent."""

    def __init__(
        self,
        refresh: Callable[[str, str], Any],
        metrics: OperatorMetrics,
        workers: PriorityWorkers,
        attempts: int = REFRESH_ATTEMPTS,
        retry_delay: float = RETRY_DELAY_SECONDS,
    ) -> None:
        self.workers = workers
        self._refresh = refresh
        self._metrics = metrics
        self._attempts = attempts
        self._retry_delay = retry_delay
        self._waiting: dict[tuple[str, str], int] = {}  # benchmarks whose refresh waits for a thread: priority

    def waiting(self, namespace: str, name: str) -> int | None:
        """The priority of the refresh of this benchmark that waits for a thread, if one does."""
        return self._waiting.get((namespace, name))

    async def soon(self, namespace: str, name: str, priority: int = ROUTINE) -> None:
        """Refresh on a worker thread, unless a refresh of this benchmark at least as urgent waits already."""
        key = (namespace, name)
        if self._waiting.get(key, priority + 1) <= priority:
            return
        self._waiting[key] = priority

        def run() -> None:
            self._waiting.pop(key, None)  # from here on, a new event needs a refresh of its own
            timed(self._metrics, lambda: self._refresh(namespace, name))

        try:
            # kopf never retries an event handler: a refresh the API server refused (429 under load, a dropped
            # connection) would leave the status stale until the benchmark's next event, and after its Job
            # finished there may be none.
            await retried(
                lambda: asyncio.wrap_future(self.workers.submit(priority, run)),
                self._attempts,
                self._retry_delay,
                RetryLater,
            )
        finally:
            if self._waiting.get(key) == priority:
                self._waiting.pop(key, None)


class QueuePositionPoller:
    """Polls the Queued benchmarks' positions and refreshes those that moved, at a bounded rate."""

    def __init__(
        self,
        poll: Callable[[], list[tuple[str, str]]],
        workers: PriorityWorkers,
        refresh: Callable[[str, str], Awaitable[None]],
        interval: float = QUEUE_POSITION_SECONDS,
        refreshes_per_second: float = POSITION_REFRESHES_PER_SECOND,
        refreshes_at_once: int = POSITION_REFRESHES_AT_ONCE,
    ) -> None:
        self.interval = interval
        self._poll = poll
        self._workers = workers
        self._refresh = refresh
        self._refreshes_per_second = refreshes_per_second
        self._at_once = asyncio.Semaphore(refreshes_at_once)

    async def poll_once(self) -> float | None:
        """One poll and the refreshes it causes; returns the wait before the next poll (None: the poll failed)."""
        try:
            moved = await asyncio.wrap_future(self._workers.submit(ROUTINE, self._poll))
            # Awaited before the next poll: the polls never outrun the refreshes they cause.
            outcomes = await asyncio.gather(
                *(self._refresh_moved(namespace, name) for namespace, name in moved), return_exceptions=True
            )
        except Exception as error:  # never let one bad poll end the polling
            log.warning("polling queue positions failed: %s", error)
            return None
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                log.warning("refreshing a queued benchmark's position failed: %s", outcome)
        return max(self.interval, len(moved) / self._refreshes_per_second)

    async def run(self) -> None:
        delay = self.interval
        while True:
            await asyncio.sleep(delay)
            following = await self.poll_once()
            if following is not None:
                delay = following

    async def _refresh_moved(self, namespace: str, name: str) -> None:
        async with self._at_once:
            await self._refresh(namespace, name)


def finished(job: Mapping[str, Any]) -> bool:
    view = JobView.from_dict(job)
    return view.complete or view.failed_reason is not None


class Dispatch:
    """The operator's shared state in kopf's memo: the Reconciler, its threads, the position poller."""

    def __init__(self, reconciler: Reconciles, threads: ControllerThreads) -> None:
        self.reconciler = reconciler
        self.threads = threads
        self.seen = SeenSignatures()
        self._refresher: Refresher | None = None
        self._poller: asyncio.Task[None] | None = None
        self._deadline_poller: asyncio.Task[None] | None = None

    @property
    def refresher(self) -> Refresher:
        if self._refresher is None:
            raise RuntimeError("the dispatch has not started (kopf's startup handler starts it)")
        return self._refresher

    def start(self, indices: Mapping[str, Any]) -> None:
        """Point the reconciler at kopf's indices (``indices``: kopf's, by name; kopf makes them before its
        startup handlers run and keeps the same ones to the end), start the refresh threads and, in the running
        event loop, the queue position poller."""
        self.reconciler.children = IndexedChildren(indices, self.reconciler.api_children)
        self.threads.start()
        self._refresher = Refresher(self.reconciler.refresh, self.reconciler.metrics, self.threads.refreshes)
        poller = QueuePositionPoller(self.reconciler.positions.poll, self.threads.refreshes, self.refresher.soon)
        self._poller = asyncio.get_running_loop().create_task(poller.run())
        deadlines = DeadlinePoller(self.reconciler.deadlines, self.refresher.soon)
        self._deadline_poller = asyncio.get_running_loop().create_task(deadlines.run())

    async def stop(self) -> None:
        self.threads.stop()
        tasks = [task for task in (self._poller, self._deadline_poller) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._poller = self._deadline_poller = None

    def ensure(self, body: Mapping[str, Any]) -> None:
        timed(self.reconciler.metrics, lambda: self.reconciler.ensure(body))

    def cancel_changed(self, namespace: str | None, name: str, cancel: Any) -> None:
        if cancel and namespace:
            timed(self.reconciler.metrics, lambda: self.reconciler.cancel(namespace, name))

    async def benchmark_event(
        self, type: str | None, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> None:
        if not namespace:
            return
        if type == "DELETED":
            self.reconciler.forget(namespace, name)
            self.seen.changed(("benchmark", namespace, name), None)
        elif type == "ADDED" and not (body.get("status") or {}).get("phase"):
            # A new benchmark: its creation handler writes the first status. A refresh here too made one more
            # GET and PATCH per benchmark in a burst of creations, and waited on the same lock.
            return
        # Also on the initial listing (type None): a restarted operator restores its result gauges.
        elif self.seen.changed(("benchmark", namespace, name), benchmark_signature(body)):
            await self.refresher.soon(namespace, name)

    async def child_event(
        self,
        kind: str,
        type: str | None,
        namespace: str | None,
        name: str,
        labels: Mapping[str, str],
        body: Mapping[str, Any],
    ) -> None:
        """A benchmark's Job or pod changed: refresh it, first when its Job just finished."""
        benchmark = labels.get(BENCHMARK_LABEL)
        signature = None if type == "DELETED" else child_signature(kind, body)
        if benchmark and namespace and self.seen.changed((kind, namespace, name), signature):
            await self.refresher.soon(namespace, benchmark, URGENT if kind == "Job" and finished(body) else ROUTINE)

    async def workload_event(
        self, type: str | None, namespace: str | None, name: str, meta: Mapping[str, Any], body: Mapping[str, Any]
    ) -> None:
        """Kueue's Workload of a queued benchmark's Job (Job name = benchmark name) changed: admission, the reason
        it waits, preemption. Kueue rewrites a waiting Workload's status often (each scheduling attempt): only
        what the status reads counts."""
        # Only the Workloads of the benchmarks' own Jobs: every team's Workload is an event here.
        job = benchmark_job_of(self.reconciler.children, namespace, meta) if namespace else None
        signature = None if type == "DELETED" else (kueue.WorkloadView.from_dict(body),)
        if job and namespace and self.seen.changed(("Workload", namespace, name), signature):
            await self.refresher.soon(namespace, job)
