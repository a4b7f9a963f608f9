"""Notices that vLLM's engine core process died, and wakes the engine call waiting for its outputs.

vLLM 0.32's own monitor (``MPClient.start_engine_core_monitor``) sees the death: it sets
``resources.engine_dead`` and shuts the client down. Its async client then queues an ``EngineDeadError`` for
whoever waits on outputs; its sync client, the one ``vllm.LLM`` uses, only ends the thread that fills
``outputs_queue``, so ``SyncMPClient.get_output`` (inside ``LLM.generate`` or ``llm_engine.step``) waits on that
queue forever. This watch waits on the same processes' sentinels (a blocking wait: no CPU until a process
ends), and then puts the death into that queue, so the waiting call raises. Calls made after it raise
vLLM's own ``EngineDeadError`` (``ensure_alive``).

The waiting is done by the kernel; the checks in ``death`` run only after an engine call has raised.
"""

from __future__ import annotations

import multiprocessing.connection
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from batchmark.runner.engines.base import EngineDead
from batchmark.runner.lifecycle.exitstatus import describe_exit

# After a process's sentinel fires, how long to wait for its exit code (it may be reaped by vLLM's monitor
# thread at the same moment, which then caches it on the shared Process object).
EXIT_CODE_SECONDS = 1.0


class WatchedProcess(Protocol):
    """What the watch uses of ``multiprocessing.Process`` (vLLM's engine core processes are ones)."""

    @property
    def sentinel(self) -> int: ...

    @property
    def exitcode(self) -> int | None: ...

    @property
    def pid(self) -> int | None: ...

    def join(self, timeout: float | None = None) -> None: ...


class EngineCoreWatch:
    """Watches the engine's processes from a daemon thread; ``death`` says whether one has died unasked.

    ``wake`` receives the ``EngineDead`` once, from the watch's thread, when a process dies before
    ``closing`` was called (a shutdown ends the processes too, and that is no death).
    """

    def __init__(self, processes: Sequence[WatchedProcess], wake: Callable[[EngineDead], None]) -> None:
        self._processes = list(processes)
        self._wake = wake
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._died: EngineDead | None = None
        self._thread = threading.Thread(target=self._watch, name="batchmark-engine-core-watch", daemon=True)
        if self._processes:
            self._thread.start()

    def closing(self) -> None:
        """The engine is being shut down on purpose: its processes ending from now on is no death."""
        self._closing.set()

    def death(self) -> EngineDead | None:
        """The engine's death, if one of its processes has ended unasked (a non-blocking check)."""
        if self._died is not None or self._closing.is_set():
            return self._died
        ended = multiprocessing.connection.wait([process.sentinel for process in self._processes], timeout=0)
        return self._record(ended) if ended else None

    def _watch(self) -> None:
        ended = multiprocessing.connection.wait([process.sentinel for process in self._processes])
        if self._closing.is_set():
            return
        died = self._record(ended)
        if died is not None:
            self._wake(died)

    def _record(self, ended: Sequence[Any]) -> EngineDead | None:
        with self._lock:
            if self._died is None and not self._closing.is_set():
                process = next(process for process in self._processes if process.sentinel in ended)
                code = _exit_code(process)
                self._died = EngineDead(f"vLLM's engine core process {process.pid} died ({describe_exit(code)})")
            return self._died


def _exit_code(process: WatchedProcess) -> int | None:
    deadline = time.monotonic() + EXIT_CODE_SECONDS
    process.join(EXIT_CODE_SECONDS)
    # join() finds no code where another thread reaped the process first; that thread stores it shortly.
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return process.exitcode


def watch_engine_core(engine_core: Any) -> EngineCoreWatch | None:
    """A watch on ``llm.llm_engine.engine_core``'s processes: None where vLLM runs the engine in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: an engine that dies takes this process with it) or its client has
    no output queue to wake."""
    resources = getattr(engine_core, "resources", None)
    processes = getattr(getattr(resources, "engine_manager", None), "processes", None)
    outputs_queue = getattr(engine_core, "outputs_queue", None)
    if not processes or outputs_queue is None:
        return None
    return EngineCoreWatch(processes, outputs_queue.put_nowait)


def watch_async_engine_core(engine_core: Any) -> EngineCoreWatch | None:
    """A watch on ``AsyncLLM.engine_core``'s processes, for the words of a death: vLLM's async client wakes its
    streams itself (an ``EngineDeadError`` each), so there is nothing to wake. None where the engine runs in this
    process."""
    resources = getattr(engine_core, "resources", None)
    processes = getattr(getattr(resources, "engine_manager", None), "processes", None)
    if not processes:
        return None
    return EngineCoreWatch(processes, lambda died: None)
