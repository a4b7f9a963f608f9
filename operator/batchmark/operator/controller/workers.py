"""The controller's threads and locks, all of them but kopf's own, in one place.

- How many threads each kind of work has (``KOPF_THREADS``, ``REFRESH_THREADS``, ``CREATOR_THREADS``), and the
  API client's connections that serve them (``API_CONNECTIONS``).
- ``PriorityWorkers``: the refreshes' threads, which take the most urgent call first. Refreshes are blocking
  API calls; with hundreds of benchmarks most of them are routine (a pod was scheduled, a runner reported), and
  a few matter to someone waiting (a Job finished: `kubectl wait` returns when the phase says so). A
  first-in-first-out pool makes those few wait behind every routine one queued before them; here they go
  first. Within one priority the order is FIFO.
- ``BenchmarkLocks``: one lock per benchmark, so that its Job's, pods' and own events, which arrive on different
  threads, are handled one at a time.
- ``ControllerThreads``: the above and the threads that make a benchmark's independent creations at once, as
  one object the reconciler and the dispatch are handed; the reconciler itself starts no thread and keeps no
  lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

KOPF_THREADS = 48  # threads for kopf's synchronous handlers (its executor): creation, cancel
REFRESH_THREADS = 8  # threads for refreshes after an event
CREATOR_THREADS = 32  # threads that make the calls of the benchmarks being set up, for all of them
API_CONNECTIONS = KOPF_THREADS + REFRESH_THREADS + CREATOR_THREADS  # one pooled connection per thread

URGENT = 0
ROUTINE = 1
_STOP = -1  # sorts before any work: a stopping pool takes nothing more


class PriorityWorkers:
    """A fixed number of threads serving submitted calls, lowest priority number first."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Callable[[], Any] | None, concurrent.futures.Future[Any]]]
        self._queue = queue.PriorityQueue()
        self._order = itertools.count()
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{index}", daemon=True) for index in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, priority: int, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        if priority < URGENT:
            raise ValueError(f"priority {priority}: URGENT ({URGENT}) is the most urgent")
        if self._stopping.is_set():
            raise RuntimeError("the workers are shut down")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((priority, next(self._order), call, future))
        return future

    def shutdown(self) -> None:
        """Stop taking work: calls that have not started are cancelled; running ones finish on their own."""
        self._stopping.set()
        while True:
            try:
                _, _, _, future = self._queue.get_nowait()
            except queue.Empty:
                break
            future.cancel()
        for _ in self._threads:
            self._queue.put((_STOP, next(self._order), None, concurrent.futures.Future()))

    def _serve(self) -> None:
        while True:
            _, _, call, future = self._queue.get()
            if call is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as error:  # handed to whoever awaits the future, as an executor does
                future.set_exception(error)


async def retried(
    call: Callable[[], Awaitable[None]], attempts: int, delay_seconds: float, retry_on: type[BaseException]
) -> None:
    """Await ``call()``; when it raises ``retry_on``, again after ``delay_seconds`` times the attempts so far,
    up to ``attempts`` in all (the last error is raised)."""
    for attempt in range(1, attempts + 1):
        try:
            await call()
            return
        except retry_on:
            if attempt == attempts:
                raise
            await asyncio.sleep(delay_seconds * attempt)


class BenchmarkLocks:
    """One reentrant lock per benchmark: Job, pod and resource events arrive on different threads, and one
    benchmark is handled by one of them at a time."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], threading.RLock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def held(self, namespace: str, name: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault((namespace, name), threading.RLock())
        with lock:
            yield

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._locks.pop((namespace, name), None)


class ControllerThreads:
    """The controller's threads and locks: the benchmarks' locks, the creators (started as they are needed)
    and the refresh workers (started by ``start``, in kopf's startup handler)."""

    def __init__(self, refresh_threads: int = REFRESH_THREADS, creator_threads: int = CREATOR_THREADS) -> None:
        self.locks = BenchmarkLocks()
        self._creators = concurrent.futures.ThreadPoolExecutor(creator_threads, thread_name_prefix="create")
        self._refresh_threads = refresh_threads
        self._refreshes: PriorityWorkers | None = None

    def aside(self, call: Callable[[], _R]) -> concurrent.futures.Future[_R]:
        """Run ``call`` on a creator thread while the caller goes on."""
        return self._creators.submit(call)

    def at_once(self, call: Callable[[_T], _R], arguments: Iterable[_T]) -> list[_R]:
        """``call`` of each argument, all at the same time on creator threads; the results in order."""
        return list(self._creators.map(call, arguments))

    def start(self) -> None:
        self._refreshes = PriorityWorkers(self._refresh_threads, "refresh")

    @property
    def refreshes(self) -> PriorityWorkers:
        if self._refreshes is None:
            raise RuntimeError("the refresh threads have not started (kopf's startup handler starts them)")
        return self._refreshes

    def stop(self) -> None:
        """Stop the refresh threads; the creators' pool stays, for a creation kopf may still be running."""
        if self._refreshes is not None:
            self._refreshes.shutdown()
