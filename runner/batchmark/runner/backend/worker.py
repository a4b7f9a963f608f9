"""The engine's own process: requests in, through the engine, results out.

Two dispatch modes (``backend.dispatch``): ``batch``, the seed's micro-batches through ``generate()`` one at a
time; ``continuous`` (backend/continuous.py), requests added to the engine's scheduler while it runs. Either way
one thread owns the engine (vLLM's ``LLM`` is not thread-safe) and a receiver thread queues what arrives.

Both directions carry lists, so one pipe message moves a whole batch: the dispatcher's cost per request
stays a few microseconds however fast the engine is.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.resource_tracker
import os
import queue as queue_module
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import cast

from batchmark.runner.backend.backend import VllmPythonBatchBackend
from batchmark.runner.backend.batcher import MicroBatcher, RequestQueue
from batchmark.runner.backend.continuous import AdmissionQueue, dispatch_continuously
from batchmark.runner.backend.messages import (
    BatchReport,
    Crashed,
    Drain,
    Drained,
    FromWorker,
    LoadFailed,
    Ready,
    Reconfigure,
    Reconfigured,
    Stop,
    Submit,
    ToWorker,
)
from batchmark.runner.config import BackendConfig
from batchmark.runner.data import RequestSpec
from batchmark.runner.engines.base import NO_TIMINGS, Completion, ContinuousEngine, EngineInfo, WorkItem
from batchmark.runner.shutdown import StopFlag

MP_CONTEXT_VARIABLE = "BATCHMARK_MP_CONTEXT"
# How often a wait on the worker looks up from the pipe to see whether it should give up.
_CANCEL_POLL_SECONDS = 0.1


@dataclass
class WorkerReady:
    info: EngineInfo
    load_seconds: float
    pid: int | None = None


class WorkerFailed(RuntimeError):
    """The worker could not load its engine or died; the message carries the worker's own error."""


def mp_context_name() -> str:
    name = os.environ.get(MP_CONTEXT_VARIABLE, "spawn")
    if name not in ("spawn", "fork", "forkserver"):
        raise ValueError(f"{MP_CONTEXT_VARIABLE}={name!r}: use spawn, fork or forkserver (default: spawn)")
    return name


class EngineWorker:
    """Handle in the main process on the worker process."""

    def __init__(self, config: BackendConfig, seed: int) -> None:
        self._context_name = mp_context_name()
        context = cast(multiprocessing.context.SpawnContext, multiprocessing.get_context(self._context_name))
        self._conn, child_conn = context.Pipe(duplex=True)
        # Not daemonic: vLLM's engine starts processes of its own, which daemonic processes may not.
        self._process = context.Process(
            target=serve, args=(child_conn, config, seed), name="batchmark-engine", daemon=False
        )
        self._child_conn = child_conn
        self._ready = False

    def start(self, cancel: StopFlag | None = None) -> WorkerReady | None:
        """Start the process and wait until its engine is loaded; None when ``cancel`` was set first."""
        # Ctrl-C reaches the whole process group, and the worker must never die of it, not even before ``serve``
        # ignores it: it starts with SIGINT blocked (a signal mask survives fork and exec), and a Ctrl-C meanwhile
        # waits for the main process's handler.
        if self._context_name != "fork":
            # Started now, before the mask: starting it unblocks SIGINT and SIGTERM when done, undoing ours.
            multiprocessing.resource_tracker.ensure_running()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        self._child_conn.close()
        while True:
            if cancel is not None and cancel.is_set():
                return None
            if not self._conn.poll(_CANCEL_POLL_SECONDS):
                continue
            message = self._receive(timeout=0)
            if isinstance(message, Ready):
                self._ready = True
                return WorkerReady(info=message.info, load_seconds=message.load_seconds, pid=self._process.pid)
            if isinstance(message, LoadFailed):
                self._process.join(timeout=10)
                raise WorkerFailed(message.message)

    def submit(self, requests: list[tuple[RequestSpec, float]]) -> None:
        self._send(Submit(requests))

    def receive(self, timeout: float | None) -> list[FromWorker]:
        """Every message waiting, after waiting up to ``timeout`` for the first."""
        messages: list[FromWorker] = []
        if not self._conn.poll(timeout):
            return messages
        while True:
            messages.append(self._receive(timeout=0))
            if not self._conn.poll(0):
                return messages

    def drain(self) -> list[BatchReport]:
        """Drop queued requests, wait for the batch in progress; returns its reports."""
        self._send(Drain())
        reports: list[BatchReport] = []
        while True:
            message = self._receive(timeout=None)
            if isinstance(message, Drained):
                return reports
            if isinstance(message, BatchReport):
                reports.append(message)

    def reconfigure(self, batch_size: int, batch_timeout: float, dispatch: str) -> None:
        """Change how the worker feeds its engine, keeping the engine; call with nothing in flight."""
        self._send(Reconfigure(batch_size, batch_timeout, dispatch))
        while not isinstance(self._receive(timeout=None), Reconfigured):
            pass  # a report of a request from before the drain: nothing waits for it any more

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def close(self, grace: float = 30.0, hurry: StopFlag | None = None) -> None:
        """Ask the worker to stop and give it ``grace`` seconds (cut short by ``hurry``) before terminating it.

        A worker still loading its engine reads no messages, so it is terminated at once.
        """
        if self._process.pid is None:
            return
        if self._ready:
            with contextlib.suppress(WorkerFailed):
                self._send(Stop())
            deadline = time.monotonic() + grace
            while self._process.is_alive() and time.monotonic() < deadline:
                if hurry is not None and hurry.is_set():
                    break
                self._process.join(timeout=min(_CANCEL_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()

    def _send(self, message: ToWorker) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise self._exited() from error

    def _exited(self) -> WorkerFailed:
        self._process.join(timeout=5)
        code = self._process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"killed by signal {-code}"
            with contextlib.suppress(ValueError):
                how = f"killed by {signal.Signals(-code).name}"
        return WorkerFailed(f"the engine worker process exited unexpectedly ({how})")

    def _receive(self, timeout: float | None) -> FromWorker:
        try:
            if timeout is not None and not self._conn.poll(timeout):
                raise TimeoutError("no message from the engine worker")
            message: FromWorker = self._conn.recv()
        except (EOFError, ConnectionResetError) as error:
            raise self._exited() from error
        if isinstance(message, Crashed):
            # The whole traceback is in the worker's log; the results carry its last line.
            lines = message.traceback.strip().splitlines()
            raise WorkerFailed(f"the engine's process crashed: {lines[-1] if lines else 'no details'}")
        return message


def serve(conn: multiprocessing.connection.Connection, config: BackendConfig, seed: int) -> None:
    """Entry point of the worker process."""
    # Ctrl-C reaches the whole process group; the main process decides how the run ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by ``EngineWorker.start``
    # A forked worker inherits the main process's handler, which only takes note: SIGTERM must end the worker.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _serve(conn, config, seed)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        # The main process is gone (killed): there is nobody to report to, so end without a word.
        pass
    finally:
        conn.close()


def _serve(conn: multiprocessing.connection.Connection, config: BackendConfig, seed: int) -> None:
    backend = VllmPythonBatchBackend(config, seed)
    try:
        backend.validate()
    except Exception as error:
        conn.send(LoadFailed(f"loading the {config.engine} engine failed: {type(error).__name__}: {error}"))
        return
    engine = backend._ensure_engine()
    if config.dispatch == "continuous" and not isinstance(engine, ContinuousEngine):
        message = f"backend.dispatch=continuous: the {config.engine} engine cannot take requests while running"
        conn.send(LoadFailed(message))
        return
    conn.send(Ready(engine.info, backend.load_seconds or 0.0))
    settings = Reconfigure(config.batch_size, config.batch_timeout, config.dispatch)
    queue = _new_queue(settings)
    switch = _QueueSwitch(queue)
    send_lock = threading.Lock()
    receiver = threading.Thread(
        target=_receive_requests, args=(conn, switch, send_lock), name="batchmark-receiver", daemon=True
    )
    receiver.start()
    try:
        # vLLM's LLM is not thread-safe: this thread alone calls the engine, in either mode. Each pass of the
        # loop feeds the engine by one set of settings until the receiver closes the queue: for a sweep's next
        # point (a new queue follows) or for good.
        while True:
            if isinstance(queue, AdmissionQueue):
                dispatch_continuously(conn, cast(ContinuousEngine, engine), queue, send_lock, settings.batch_size)
            else:
                _dispatch_batches(conn, backend, cast(MicroBatcher[WorkItem], queue), send_lock)
            requested = switch.next_settings()
            if requested is None:
                return
            if requested.dispatch == "continuous" and not isinstance(engine, ContinuousEngine):
                raise RuntimeError(
                    f"dispatch=continuous: the {config.engine} engine cannot take requests while running"
                )
            settings = requested
            queue = _new_queue(settings)
            switch.install(queue)
            with send_lock:
                conn.send(Reconfigured())
    except (BrokenPipeError, ConnectionResetError, EOFError):
        raise
    except Exception:
        # Printed here for the log, and sent whole to the main process, which keeps its last line as the reason.
        traceback.print_exc()
        with send_lock:
            conn.send(Crashed(traceback.format_exc()))


def _new_queue(settings: Reconfigure) -> RequestQueue[WorkItem]:
    if settings.dispatch == "continuous":
        return AdmissionQueue()
    return MicroBatcher(settings.batch_size, settings.batch_timeout)


class _QueueSwitch:
    """The queue both threads use, replaced between a sweep's points: the receiver asks for new settings and
    closes the queue; the engine thread, once its dispatcher returns, installs the next queue."""

    def __init__(self, first: RequestQueue[WorkItem]) -> None:
        self.current = first
        self._requested: queue_module.SimpleQueue[Reconfigure] = queue_module.SimpleQueue()
        self._installed: queue_module.SimpleQueue[RequestQueue[WorkItem]] = queue_module.SimpleQueue()

    def request(self, settings: Reconfigure) -> None:
        """Receiver thread: hand over the settings, stop the current dispatcher, wait for the new queue."""
        self._requested.put(settings)
        self.current.close()
        self.current = self._installed.get()

    def next_settings(self) -> Reconfigure | None:
        """Engine thread, its dispatcher returned: the settings asked for, or None when the worker stops."""
        try:
            return self._requested.get_nowait()
        except queue_module.Empty:
            return None

    def install(self, queue: RequestQueue[WorkItem]) -> None:
        self._installed.put(queue)


def _receive_requests(
    conn: multiprocessing.connection.Connection, switch: _QueueSwitch, send_lock: threading.Lock
) -> None:
    while True:
        try:
            message: ToWorker = conn.recv()
        except (EOFError, OSError):
            switch.current.close()
            return
        if isinstance(message, Submit):
            now = time.monotonic()
            switch.current.put(WorkItem(spec, enqueued_at, now) for spec, enqueued_at in message.requests)
        elif isinstance(message, Drain):
            switch.current.drain()
            try:
                with send_lock:
                    conn.send(Drained())
            except OSError:  # the main process is gone
                switch.current.close()
                return
        elif isinstance(message, Reconfigure):
            switch.request(message)
        elif isinstance(message, Stop):
            switch.current.close()
            return


def _dispatch_batches(
    conn: multiprocessing.connection.Connection,
    backend: VllmPythonBatchBackend,
    batcher: MicroBatcher[WorkItem],
    send_lock: threading.Lock,
) -> None:
    batch_id = 0
    while (batch := batcher.next_batch()) is not None:
        started = time.monotonic()
        try:
            completions = backend.run_batch(batch.items)
        except Exception as error:  # the engine itself broke: every request of the batch failed
            message = f"engine error: {type(error).__name__}: {error}"
            completions = [Completion(item.spec.request_id, 0, 0, message, NO_TIMINGS) for item in batch.items]
        finished = time.monotonic()
        report = BatchReport(batch_id, batch.full, batch.closed_at, started, finished, completions, len(batcher))
        with send_lock:
            conn.send(report)
        batcher.task_done()
        batch_id += 1
