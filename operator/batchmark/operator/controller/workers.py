"""Worker threads that take the most urgent call first.

The operator's refreshes are blocking API calls, so they run on threads; with hundreds of benchmarks most of
them are routine (a pod was scheduled, a runner reported), and a few matter to someone waiting (a Job
finished: `kubectl wait` returns when the phase says so). A first-in-first-out pool makes those few wait
behind every routine one queued before them; here they go first. Within one priority the order is FIFO.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any

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
