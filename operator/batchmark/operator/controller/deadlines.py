"""When each benchmark is to be refreshed again with no event to wake it: a start bound that passes.

A pod that waits for a node, its image or its container may see no event for the rest of its life (the
kubelet retries a CreateContainerConfigError without changing the pod; the scheduler's Unschedulable stays as
it is), so the refresh that ends the benchmark at its bound (controller.stalls) must come from a clock.
Every refresh records the next bound of its benchmark here (or that it has none); one task of the dispatch
(``DeadlinePoller``) asks every second which are due and refreshes those. A refresh that finds its bound not
quite passed (the API server's clock ahead of ours) records it again, and is asked again a second later.
A benchmark over several pods records a time a few seconds ahead while it runs: its JobSet has no watch
(reconcile.py), and its end comes after its pods' last event.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


class Deadlines:
    """Each benchmark's next start bound, as the last refresh found it; thread-safe (refreshes run on threads)."""

    def __init__(self) -> None:
        self._due: dict[tuple[str, str], datetime.datetime] = {}
        self._lock = threading.Lock()

    def set(self, namespace: str, name: str, deadline: datetime.datetime | None) -> None:
        with self._lock:
            if deadline is None:
                self._due.pop((namespace, name), None)
            else:
                self._due[(namespace, name)] = deadline

    def forget(self, namespace: str, name: str) -> None:
        self.set(namespace, name, None)

    def take_due(self, now: datetime.datetime) -> list[tuple[str, str]]:
        """The benchmarks whose bound has passed at ``now``, no longer recorded (their refresh records the next)."""
        with self._lock:
            due = [key for key, deadline in self._due.items() if deadline <= now]
            for key in due:
                del self._due[key]
        return due

    def __len__(self) -> int:
        with self._lock:
            return len(self._due)


class DeadlinePoller:
    """Refreshes the benchmarks whose start bound passed; ``refresh`` is the dispatch's (on a worker thread)."""

    def __init__(
        self,
        deadlines: Deadlines,
        refresh: Callable[[str, str], Awaitable[None]],
        interval: float = POLL_SECONDS,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.deadlines = deadlines
        self.interval = interval
        self._refresh = refresh
        self._clock = clock

    async def poll_once(self) -> None:
        now = self._clock()
        due = self.deadlines.take_due(now)
        refreshes = (self._refresh(namespace, name) for namespace, name in due)
        outcomes = await asyncio.gather(*refreshes, return_exceptions=True)
        for (namespace, name), outcome in zip(due, outcomes, strict=True):
            if isinstance(outcome, Exception):  # never let one failed refresh end the polling
                log.warning("refreshing %s/%s at its start bound failed: %s", namespace, name, outcome)
                self.deadlines.set(namespace, name, now)  # due still: asked again at the next poll

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.poll_once()
