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
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from batchmark.runner.backend.backend import VllmPythonBatchBackend
from batchmark.runner.backend.batcher import MicroBatcher, RequestQueue
from batchmark.runner.backend.continuous import AdmissionQueue, dispatch_continuously
from batchmark.runner.config import BackendConfig
from batchmark.runner.data import RequestSpec
from batchmark.runner.engines.base import (
    NO_TIMINGS,
    Completion,
    ContinuousEngine,
    Engine,
    EngineClock,
    EngineInfo,
    WorkItem,
)

MP_CONTEXT_VARIABLE = "BATCHMARK_MP_CONTEXT"


class BatchReport(NamedTuple):
    """One finished micro-batch, timed on ``time.monotonic()``."""

    batch_id: int
    full: bool
    closed_at: float  # when the batch was complete: filled, or its timeout passed
    started_at: float  # the dispatcher took the batch and called the engine (its prompts were already built)
    finished_at: float  # its completions were ready
    completions: list[Completion]
    queue_depth: int  # requests waiting in the worker when the batch finished
    # Continuous dispatch only: when each completion's request entered the engine (None: at started_at). There
    # a report is the requests one engine step finished, and covers the busy time since the previous report.
    dispatched: list[float] | None = None
    # Continuous dispatch only: requests the engine was running in the step that produced the report, i.e. its
    # effective batch size (0: no step ran, the report only carries requests the engine refused).
    engine_batch: int | None = None
    # Seconds inside the engine's own calls (generate(), or the step() calls the report covers); None: the
    # whole span from started_at to finished_at.
    engine_seconds: float | None = None
    # The dispatching thread's own seconds for this report outside the engine's calls: matching outputs,
    # bookkeeping, sending the previous report. The engine is idle for all of it.
    overhead_seconds: float = 0.0
    steps: int = 0  # engine steps the report covers
    # CPU seconds the worker's own threads have spent since the engine was ready, excluding the engine's calls.
    harness_cpu: float = 0.0

    @property
    def effective_batch_size(self) -> int:
        return self.engine_batch if self.engine_batch is not None else len(self.completions)

    @property
    def engine_busy(self) -> float:
        """Seconds the engine worked for this report."""
        if self.engine_seconds is None:
            return self.finished_at - self.started_at
        return self.engine_seconds

    def dispatch_times(self) -> list[float]:
        """When each completion's request entered the engine."""
        return self.dispatched if self.dispatched is not None else [self.started_at] * len(self.completions)

    def batch_wait(self, enqueued_at: float) -> float:
        """Time a request waited for its batch to be complete; continuous dispatch has no batch to wait for."""
        return 0.0 if self.dispatched is not None else max(0.0, self.closed_at - enqueued_at)


@dataclass
class WorkerReady:
    info: EngineInfo
    load_seconds: float


class WorkerFailed(RuntimeError):
    """The worker could not load its engine or died; the message carries the worker's own error."""


def mp_context_name() -> str:
    name = os.environ.get(MP_CONTEXT_VARIABLE, "spawn")
    if name not in ("spawn", "fork", "forkserver"):
        raise ValueError(f"{MP_CONTEXT_VARIABLE}={name!r}: use spawn, fork or forkserver")
    return name


class EngineWorker:
    """Handle in the main process on the worker process."""

    def __init__(self, config: BackendConfig, seed: int) -> None:
        context = cast(multiprocessing.context.SpawnContext, multiprocessing.get_context(mp_context_name()))
        self._conn, child_conn = context.Pipe(duplex=True)
        # Not daemonic: vLLM's engine starts processes of its own, which daemonic processes may not.
        self._process = context.Process(
            target=serve, args=(child_conn, config, seed), name="batchmark-engine", daemon=False
        )
        self._child_conn = child_conn

    def start(self) -> WorkerReady:
        """Start the process and wait until its engine is loaded."""
        self._process.start()
        self._child_conn.close()
        while True:
            message = self._receive(timeout=None)
            if message[0] == "ready":
                return WorkerReady(info=message[1], load_seconds=message[2])
            if message[0] == "failed":
                self._process.join(timeout=10)
                raise WorkerFailed(message[1])

    def submit(self, requests: list[tuple[RequestSpec, float]]) -> None:
        self._conn.send(("submit", requests))

    def receive(self, timeout: float | None) -> list[tuple[Any, ...]]:
        """Every message waiting, after waiting up to ``timeout`` for the first."""
        messages: list[tuple[Any, ...]] = []
        if not self._conn.poll(timeout):
            return messages
        while True:
            messages.append(self._receive(timeout=0))
            if not self._conn.poll(0):
                return messages

    def drain(self) -> list[tuple[Any, ...]]:
        """Drop queued requests, wait for the batch in progress; returns its reports."""
        self._conn.send(("drain",))
        reports: list[tuple[Any, ...]] = []
        while True:
            message = self._receive(timeout=None)
            if message[0] == "drained":
                return reports
            reports.append(message)

    def close(self, grace: float = 30.0) -> None:
        if self._process.pid is None:
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self._conn.send(("stop",))
        self._process.join(timeout=grace)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()

    def _receive(self, timeout: float | None) -> tuple[Any, ...]:
        try:
            if timeout is not None and not self._conn.poll(timeout):
                raise TimeoutError("no message from the engine worker")
            message: tuple[Any, ...] = self._conn.recv()
        except (EOFError, ConnectionResetError) as error:
            self._process.join(timeout=5)
            raise WorkerFailed(
                f"the engine worker process exited unexpectedly (exit code {self._process.exitcode})"
            ) from error
        if message[0] == "crashed":
            raise WorkerFailed(message[1])
        return message


def serve(conn: multiprocessing.connection.Connection, config: BackendConfig, seed: int) -> None:
    """Entry point of the worker process."""
    # Ctrl-C reaches the whole process group; the main process decides how the run ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    backend = VllmPythonBatchBackend(config, seed)
    try:
        backend.validate()
    except Exception as error:
        conn.send(("failed", f"loading the {config.engine} engine failed: {type(error).__name__}: {error}"))
        conn.close()
        return
    engine = backend._ensure_engine()
    if config.dispatch == "continuous" and not isinstance(engine, ContinuousEngine):
        message = f"backend.dispatch=continuous: the {config.engine} engine cannot take requests while running"
        conn.send(("failed", message))
        conn.close()
        return
    conn.send(("ready", engine.info, backend.load_seconds))
    queue: RequestQueue[WorkItem]
    if config.dispatch == "continuous":
        queue = AdmissionQueue()
    else:
        queue = MicroBatcher(config.batch_size, config.batch_timeout)
    send_lock = threading.Lock()
    receiver = threading.Thread(
        target=_receive_requests, args=(conn, queue, send_lock, engine), name="batchmark-receiver", daemon=True
    )
    receiver.start()
    usage = HarnessUsage(engine.clock, [receiver])
    try:
        # vLLM's LLM is not thread-safe: this thread alone calls the engine, in either mode.
        if isinstance(queue, AdmissionQueue):
            dispatch_continuously(conn, cast(ContinuousEngine, engine), queue, send_lock, config.batch_size, usage)
        else:
            _dispatch_batches(conn, engine, queue, send_lock, usage)
    except Exception:
        with send_lock:
            conn.send(("crashed", traceback.format_exc()))
    finally:
        conn.close()


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


def _receive_requests(
    conn: multiprocessing.connection.Connection,
    batcher: RequestQueue[WorkItem],
    send_lock: threading.Lock,
    engine: Engine,
) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            batcher.close()
            return
        kind = message[0]
        if kind == "submit":
            now = time.monotonic()
            # Prompts are built here, as requests arrive, so the engine thread goes from one engine call to the
            # next without building any.
            batcher.put([engine.prepare(WorkItem(spec, enqueued_at, now)) for spec, enqueued_at in message[1]])
        elif kind == "drain":
            batcher.drain()
            with send_lock:
                conn.send(("drained",))
        elif kind == "stop":
            batcher.close()
            return


def _dispatch_batches(
    conn: multiprocessing.connection.Connection,
    engine: Engine,
    batcher: MicroBatcher[WorkItem],
    send_lock: threading.Lock,
    usage: HarnessUsage,
) -> None:
    clock = engine.clock
    batch_id = 0
    carried = 0.0  # harness time spent after the previous report was made (sending it): counted in the next
    while (batch := batcher.next_batch()) is not None:
        started = time.monotonic()
        engine_before, steps_before = clock.seconds, clock.steps()
        try:
            completions = engine.run_batch(batch.items)
        except Exception as error:  # the engine itself broke: every request of the batch failed
            message = f"engine error: {type(error).__name__}: {error}"
            completions = [Completion(item.spec.request_id, 0, 0, message, NO_TIMINGS) for item in batch.items]
        finished = time.monotonic()
        engine_seconds = clock.seconds - engine_before
        report = BatchReport(
            batch_id,
            batch.full,
            batch.closed_at,
            started,
            finished,
            completions,
            len(batcher),
            engine_seconds=engine_seconds,
            overhead_seconds=max(0.0, finished - started - engine_seconds) + carried,
            steps=clock.steps() - steps_before,
            harness_cpu=usage.cpu_seconds(),
        )
        with send_lock:
            conn.send(("batch", report))
        batcher.task_done()
        carried = time.monotonic() - finished
        batch_id += 1
