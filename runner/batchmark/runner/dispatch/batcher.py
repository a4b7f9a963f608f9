"""The seed's micro-batching rules: a full batch goes at once, a partial one ``timeout`` after it began."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass
class Batch(Generic[Item]):
    """Requests dispatched together, with when the batch was complete (filled or timed out)."""

    items: list[Item]
    closed_at: float
    full: bool


class RequestQueue(Generic[Item]):
    """Requests waiting in the worker, stamped with their arrival, and whether the engine is busy with some.

    The receiver thread puts, drains and closes; the engine thread takes (in a subclass's way) and reports
    ``task_done`` when what it took has finished.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._queue: deque[tuple[float, Item]] = deque()
        self._closed = False
        self._busy = False
        self._condition = threading.Condition()

    def put(self, items: Iterable[Item]) -> None:
        with self._condition:
            now = self._clock()
            self._queue.extend((now, item) for item in items)
            self._condition.notify_all()

    def close(self) -> list[Item]:
        """Stop handing out work; returns what was still waiting."""
        with self._condition:
            self._closed = True
            dropped = [item for _, item in self._queue]
            self._queue.clear()
            self._condition.notify_all()
            return dropped

    def drain(self) -> list[Item]:
        """Drop what waits, then block until the work in progress (if any) is done; returns the dropped."""
        with self._condition:
            dropped = [item for _, item in self._queue]
            self._queue.clear()
            while self._busy and not self._closed:
                self._condition.wait()
            return dropped

    def task_done(self) -> None:
        """The work last handed out has finished."""
        with self._condition:
            self._busy = False
            self._condition.notify_all()

    def __len__(self) -> int:
        return len(self._queue)


class MicroBatcher(RequestQueue[Item]):
    """A queue that hands out batches of at most ``batch_size``.

    A batch is ready when ``batch_size`` requests wait, or when the oldest waiting request arrived
    ``batch_timeout`` seconds ago. Requests that arrive while the engine is busy wait for the next batch,
    so a batch taken after a long ``generate`` goes at once if its oldest request already timed out.
    """

    def __init__(self, batch_size: int, batch_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    def ready_at(self) -> float | None:
        """When the next batch is due by the rules, or None with nothing waiting."""
        if not self._queue:
            return None
        if len(self._queue) >= self.batch_size:
            return self._queue[self.batch_size - 1][0]
        return self._queue[0][0] + self.batch_timeout

    def next_batch(self) -> Batch[Item] | None:
        """Block until a batch is due and return it, marked in progress until ``task_done``; None once closed."""
        with self._condition:
            while True:
                if self._closed:
                    return None
                due = self.ready_at()
                now = self._clock()
                if due is not None and now >= due:
                    return self._take(due)
                self._condition.wait(None if due is None else due - now)

    def _take(self, due: float) -> Batch[Item]:
        count = min(self.batch_size, len(self._queue))
        taken = [self._queue.popleft() for _ in range(count)]
        self._busy = True
        # A member that arrived after the timeout, while the engine was busy, completed the batch later.
        closed_at = max(due, taken[-1][0])
        return Batch(items=[item for _, item in taken], closed_at=closed_at, full=count == self.batch_size)
