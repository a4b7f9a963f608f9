"""Signals, from the first moment of the process: a first SIGINT or SIGTERM stops the run cleanly, a second one
hurries the shutdown; neither ever raises, so a traceback never replaces the results.

Kubernetes stops a pod with SIGTERM and kills it 30 s later (the default grace period). After the first signal
batchmark exits within ``SHUTDOWN_SECONDS``, whatever it was doing: the engine's process gets
``ENGINE_STOP_SECONDS`` to end before it is terminated, the results are written, a Pushgateway push makes no
further attempts and is abandoned at the deadline, and the metrics linger ends at the deadline (both
``EXIT_RESERVE_SECONDS`` before ``SHUTDOWN_SECONDS``, so that the exit itself fits).

Only the standard library here (and batchmark.runner.contract, which imports nothing else): this module is
imported before anything slow, so that a signal in the first second of the process is handled like any other.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any, Final

from batchmark.runner.contract import EXIT_SIGNAL_BASE

SHUTDOWN_SECONDS: Final = 20.0
ENGINE_STOP_SECONDS: Final = 5.0
# Kept free at the end of SHUTDOWN_SECONDS for what follows the optional steps (closing the metrics server,
# the interpreter's exit), which take up to about 3 s on a busy two-core machine (benchmarks/notes/shutdown-timing.md).
EXIT_RESERVE_SECONDS: Final = 5.0
_POLL_SECONDS: Final = 0.05


class StopFlag:
    """A flag with a reason, safe to set from a signal handler: setting it takes no lock (a handler that waits
    for a lock the interrupted code holds would hang), so it is waited on by polling."""

    def __init__(self) -> None:
        self._set = False
        self.reason = "interrupted"

    def set(self, reason: str | None = None) -> None:
        if not self._set and reason is not None:
            self.reason = reason
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None) -> bool:
        """True once set; False when ``timeout`` seconds passed first (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._set:
            left = _POLL_SECONDS if deadline is None else min(_POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return False
            time.sleep(left)
        return True


class Shutdown:
    """The process's signal handling: ``stop`` is set by the first signal, ``hurry`` by the next one."""

    def __init__(self) -> None:
        self.stop = StopFlag()
        self.hurry = StopFlag()
        self.signal: int | None = None
        self.first_at: float | None = None
        self.received = 0  # signals so far
        self._previous: dict[int, Any] = {}

    @classmethod
    def install(cls) -> Shutdown:
        """Handle SIGINT and SIGTERM from now on (main thread only; elsewhere signals stay as they were)."""
        shutdown = cls()
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                shutdown._previous[number] = signal.signal(number, shutdown._handle)
        return shutdown

    def restore(self) -> None:
        """Put back the handlers that were in place before ``install`` (for callers that run batchmark in-process)."""
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def ignore_from_now_on(self) -> None:
        """Ignore SIGINT and SIGTERM for the rest of the process, once its outcome is decided. When the interpreter
        exits it puts the default handlers back in place of Python ones, and a Ctrl-C then would end the process by
        the signal (a parent sees -2, not 130) after the results were written; an ignored signal stays ignored."""
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, signal.SIG_IGN)
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.signal is None:
            self.signal = number
            self.first_at = time.monotonic()
            self.stop.set(f"interrupted by {signal.Signals(number).name}")
        else:
            self.hurry.set(f"interrupted again by {signal.Signals(number).name}")

    @property
    def exit_code(self) -> int | None:
        """128 + the first signal's number, as a shell reports a process that signal ended; None without one."""
        return None if self.signal is None else EXIT_SIGNAL_BASE + self.signal

    def seconds_left(self) -> float | None:
        """Until the deadline of the optional steps (the push, the linger): SHUTDOWN_SECONDS after the first
        signal, less the exit's reserve; None before any signal, 0 once hurried."""
        if self.hurry.is_set():
            return 0.0
        if self.first_at is None:
            return None
        return max(0.0, self.first_at + SHUTDOWN_SECONDS - EXIT_RESERVE_SECONDS - time.monotonic())

    def engine_grace(self) -> float:
        """How long the engine's process may take to stop by itself before it is terminated."""
        left = self.seconds_left()
        return ENGINE_STOP_SECONDS if left is None else min(ENGINE_STOP_SECONDS, left)
