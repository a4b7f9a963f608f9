"""The worker's outgoing messages, sent by a thread of their own and in order.

Pickling a report and writing it to the pipe are the harness's work; the engine thread hands the report over
here and goes back to the engine. A message may also be a function that makes it, called on this thread.
"""

from __future__ import annotations

import multiprocessing.connection
import queue
import threading
import traceback
from collections.abc import Callable

from batchmark.runner.dispatch.messages import Crashed, FromWorker

Outgoing = FromWorker | Callable[[], FromWorker]


class Reporter:
    """One thread owns the connection's sending side; ``send`` never blocks the caller."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[Outgoing | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="batchmark-reporter", daemon=True)
        self.thread.start()

    def send(self, message: Outgoing) -> None:
        """Queue a message, or a function that makes one (called on the reporter's thread)."""
        self._queue.put(message)

    def close(self, timeout: float = 30.0) -> None:
        """Send everything queued, then stop."""
        self._queue.put(None)
        self.thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                message = item() if callable(item) else item
            except Exception:  # a conversion that breaks is the dispatcher's crash: report it, keep order
                message = Crashed(traceback.format_exc())
            try:
                self._conn.send(message)
            except (BrokenPipeError, EOFError, OSError):
                return  # the main process is gone; nothing is left to tell
