"""The harness's own CPU in the engine worker: what the runner costs, kept apart from what the engine costs."""

from __future__ import annotations

import contextlib
import threading
import time

from batchmark.runner.engines.base import EngineClock


class HarnessUsage:
    """CPU seconds of the worker's own threads since the engine was ready, the engine's calls excluded.

    The dispatching thread (this one) counts its CPU outside the engine's calls; the helper threads (the
    receiver) count whole. vLLM's own threads and processes (its engine core in the default multiprocessing
    mode, its output threads) are never counted: they are the engine's.
    """

    def __init__(self, clock: EngineClock, helpers: list[threading.Thread]) -> None:
        self._clock = clock
        self._helper_clocks = [time.pthread_getcpuclockid(thread.ident) for thread in helpers if thread.ident]
        self._baseline = 0.0
        self._baseline = self.cpu_seconds()

    def cpu_seconds(self) -> float:
        helpers = 0.0
        for clock_id in self._helper_clocks:
            with contextlib.suppress(OSError):  # a helper that ended keeps its last reading out
                helpers += time.clock_gettime(clock_id)
        return time.thread_time() - self._clock.cpu_seconds + helpers - self._baseline
