"""The engine's own process: requests in, through the engine, results out.

Three dispatch modes: the batch backend's (``backend.dispatch``) ``batch``, the seed's micro-batches through
``generate()`` one at a time, and ``continuous`` (dispatch/continuous.py), requests added to the engine's scheduler
while it runs; the async backend's ``stream`` (dispatch/streaming.py), each request submitted to vLLM's async
engine as it arrives and its tokens read as they come. Either way one thread owns the engine (vLLM's ``LLM`` is
not thread-safe; ``AsyncLLM`` belongs to one event loop) and a receiver thread queues what arrives.

Both directions carry lists, so one pipe message moves a whole batch: the dispatcher's cost per request
stays a few microseconds however fast the engine is.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.resource_tracker
import os
import queue as queue_module
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import cast

from batchmark.runner.config.backend import STREAM_DISPATCH, BackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.backend import VllmPythonBatchBackend
from batchmark.runner.dispatch.batcher import MicroBatcher, RequestQueue
from batchmark.runner.dispatch.continuous import AdmissionQueue, dispatch_continuously
from batchmark.runner.dispatch.cpu_placement import place_process, plan
from batchmark.runner.dispatch.harness_usage import HarnessUsage
from batchmark.runner.dispatch.messages import (
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
from batchmark.runner.dispatch.process_group import group_members, kill_group, lead_own_group, wait_group_empty
from batchmark.runner.dispatch.replica_devices import ReplicaDevices
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.dispatch.streaming import dispatch_streams
from batchmark.runner.engines.base import (
    NO_TIMINGS,
    Completion,
    ContinuousEngine,
    Engine,
    EngineDead,
    EngineInfo,
    WorkItem,
)
from batchmark.runner.engines.registry import engine_entry
from batchmark.runner.engines.streaming import StreamingEngine
from batchmark.runner.lifecycle.exitstatus import describe_exit
from batchmark.runner.lifecycle.shutdown import StopFlag
from batchmark.runner.lifecycle.start_method import mp_context_name

_PREPARE_CHUNK = 16  # requests whose prompts are built before they join the queue together
# How often a wait on the worker looks up from the pipe to see whether it should give up.
_CANCEL_POLL_SECONDS = 0.1
# After Stop, by default: time for the worker to finish the engine call in progress, shut the engine down
# (vLLM's own shutdown takes ENGINE_SHUTDOWN_SECONDS at most) and exit. Past it, its process group is killed.
WORKER_EXIT_SECONDS = 10.0
# For the rest of the group once the worker is gone (a process still exiting, or one SIGKILL just hit).
GROUP_EXIT_SECONDS = 2.0


@dataclass
class WorkerReady:
    info: EngineInfo
    load_seconds: float
    pid: int | None = None


class WorkerFailed(RuntimeError):
    """The worker could not load its engine or died; the message carries the worker's own error."""


class EngineWorker:
    """Handle in the main process on the worker process and every process it starts.

    The worker leads its own process group (dispatch/process_group.py): ``close()`` returns only once every
    process of that group has ended, within ``grace + 2 * GROUP_EXIT_SECONDS`` of being called, and the worker
    ends the group itself if the main process dies. That parent-death signal follows the thread that started
    the worker: start it from a thread that outlives it (the main thread).
    """

    def __init__(
        self,
        config: BackendConfig,
        seed: int,
        devices: ReplicaDevices | None = None,
        follow_harness_cpus: bool = True,
    ) -> None:
        self._context_name = mp_context_name()
        context = cast(multiprocessing.context.SpawnContext, multiprocessing.get_context(self._context_name))
        self._conn, child_conn = context.Pipe(duplex=True)
        # Not daemonic: vLLM's engine starts processes of its own, which daemonic processes may not.
        self._process = context.Process(
            target=serve,
            args=(child_conn, config, seed, os.getpid(), devices),
            name="batchmark-engine" if devices is None else f"batchmark-engine-{devices.replica}",
            daemon=False,
        )
        self._child_conn = child_conn
        self._ready = False
        self._stop_sent = False
        # With several replicas no one worker's spare CPUs are the harness's: each sees only its own share.
        self._follow_harness_cpus = follow_harness_cpus
        self._cpus_before: set[int] | None = None  # this process's CPUs before it followed the worker

    @property
    def connection(self) -> multiprocessing.connection.Connection:
        """The pipe to the worker, for waiting on several workers at once."""
        return self._conn

    def start(self, cancel: StopFlag | None = None) -> WorkerReady | None:
        """Start the process and wait until its engine is loaded; None when ``cancel`` was set first."""
        self.launch()
        return self.wait_ready(cancel)

    def launch(self) -> None:
        """Start the process; its engine loads meanwhile (``wait_ready``)."""
        # Ctrl-C, or a pod's SIGTERM where the node signals the pod's process group, reaches the whole group
        # until the worker has a session of its own, and the worker must never die of it: it starts with both
        # blocked (a signal mask survives fork and exec), and ``serve`` discards what came meanwhile.
        if self._context_name != "fork":
            # Started now, before the mask: starting it unblocks SIGINT and SIGTERM when done, undoing ours.
            multiprocessing.resource_tracker.ensure_running()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        self._child_conn.close()

    def wait_ready(self, cancel: StopFlag | None = None) -> WorkerReady | None:
        """Wait until the launched worker's engine is loaded; None when ``cancel`` was set first."""
        while True:
            if cancel is not None and cancel.is_set():
                return None
            if not self._conn.poll(_CANCEL_POLL_SECONDS):
                continue
            message = self._receive(timeout=0)
            if isinstance(message, Ready):
                self._ready = True
                harness_cpus = message.info.details.get("harness_cpus")
                if (
                    harness_cpus and self._follow_harness_cpus
                ):  # the worker left the engine's CPUs: this process follows it until close()
                    self._cpus_before = os.sched_getaffinity(0)
                    place_process(os.getpid(), harness_cpus)
                return WorkerReady(info=message.info, load_seconds=message.load_seconds, pid=self._process.pid)
            if isinstance(message, LoadFailed):
                self._exit_status(timeout=10)
                raise WorkerFailed(message.message)

    def submit(self, requests: list[tuple[RequestSpec, float]]) -> None:
        self._send(Submit(requests))

    def receive(self, timeout: float, read_for: float = 0.0) -> list[FromWorker]:
        """The messages waiting, after waiting up to ``timeout`` for the first (see ``read_waiting``)."""
        try:
            messages = read_waiting(self._conn, timeout, read_for)
        except (EOFError, ConnectionResetError) as error:
            raise self._exited() from error
        for message in messages:
            _raise_if_crashed(message)
        return messages

    def send_drain(self) -> None:
        self._send(Drain())

    def send_reconfigure(self, batch_size: int, batch_timeout: float, dispatch: str) -> None:
        self._send(Reconfigure(batch_size, batch_timeout, dispatch))

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

    def request_stop(self) -> None:
        """Ask a ready worker to end, without waiting (``close`` waits); a worker already gone is left to close."""
        if self._ready and not self._stop_sent:
            self._stop_sent = True
            with contextlib.suppress(WorkerFailed):
                self._send(Stop())

    def close(self, grace: float = WORKER_EXIT_SECONDS, hurry: StopFlag | None = None) -> None:
        """Ask the worker to stop and give it ``grace`` seconds (cut short by ``hurry``), then kill whatever is
        left of its process group; returns once all of it has ended.

        A worker still loading its engine reads no messages, so its group is killed at once.
        """
        pid = self._process.pid
        if pid is None:
            return
        try:
            if self._ready:
                self.request_stop()
                if self._exit_status(grace, hurry) is not None:
                    # A clean exit: its last processes (vLLM's) may still be on their way out.
                    wait_group_empty(pid, GROUP_EXIT_SECONDS, exclude=pid)
        finally:
            # Until the worker is reaped its pid cannot be reused, so the group id still means its group.
            kill_group(pid)
            self._process.kill()  # in case it never got as far as leading its group
            wait_group_empty(pid, GROUP_EXIT_SECONDS, exclude=pid)
            self._process.join()
            self._conn.close()
            if self._cpus_before is not None:
                # Back where it was: a worker started next (a sweep's engine reload) inherits these CPUs, and
                # vLLM binds its model to CPUs among those it is given.
                place_process(os.getpid(), self._cpus_before)
                self._cpus_before = None

    def _exit_status(self, timeout: float, hurry: StopFlag | None = None) -> int | None:
        """Wait up to ``timeout`` (cut short by ``hurry``) for the worker to exit, leaving it unreaped; its exit
        code as ``Process.exitcode`` gives it (negative: killed by that signal), or None while it runs."""
        pid = self._process.pid
        assert pid is not None
        deadline = time.monotonic() + timeout
        while True:
            if not hasattr(os, "waitid"):  # macOS: reaping it is the only way to wait
                self._process.join(min(_CANCEL_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
                if self._process.exitcode is not None:
                    return self._process.exitcode
            else:
                try:
                    exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:  # already reaped
                    return self._process.exitcode
                if exited is not None:
                    return exited.si_status if exited.si_code == os.CLD_EXITED else -exited.si_status
                time.sleep(0.02)
            if time.monotonic() >= deadline or (hurry is not None and hurry.is_set()):
                return None

    def _send(self, message: ToWorker) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise self._exited() from error

    def _exited(self) -> WorkerFailed:
        code = self._exit_status(timeout=5)
        return WorkerFailed(f"the engine worker process exited unexpectedly ({describe_exit(code)})")

    def _receive(self, timeout: float | None) -> FromWorker:
        try:
            if timeout is not None and not self._conn.poll(timeout):
                raise TimeoutError("no message from the engine worker")
            message: FromWorker = self._conn.recv()
        except (EOFError, ConnectionResetError) as error:
            raise self._exited() from error
        _raise_if_crashed(message)
        return message


def read_waiting(
    conn: multiprocessing.connection.Connection, timeout: float, read_for: float = 0.0
) -> list[FromWorker]:
    """Wait up to ``timeout`` for a first message, then read on while more are waiting, but not past
    ``timeout`` (or ``read_for``, if longer) from the call (after it, one message at most); a crash report ends
    the reading.

    The bound is for a reader slower than the messages coming (the main process short of CPU beside a busy
    engine, which in continuous dispatch reports every step that finishes requests): reading "while any is
    waiting" would go on for as long as they come, and the run would neither refill nor see its deadline.
    """
    give_up = time.monotonic() + max(timeout, read_for)
    messages: list[FromWorker] = []
    if not conn.poll(timeout):
        return messages
    while True:
        message: FromWorker = conn.recv()
        messages.append(message)
        # Nothing follows a crash report but the pipe's end.
        if isinstance(message, Crashed) or time.monotonic() >= give_up or not conn.poll(0):
            return messages


def _raise_if_crashed(message: FromWorker) -> None:
    if isinstance(message, Crashed):
        if message.reason:
            raise WorkerFailed(message.reason)
        # The whole traceback is in the worker's log; the results carry its last line.
        lines = message.traceback.strip().splitlines()
        raise WorkerFailed(f"the engine's process crashed: {lines[-1] if lines else 'no details'}")


def serve(
    conn: multiprocessing.connection.Connection,
    config: BackendConfig,
    seed: int,
    parent_pid: int,
    devices: ReplicaDevices | None = None,
) -> None:
    """Entry point of the worker process."""
    lead_own_group(parent_pid)
    backend = VllmPythonBatchBackend(config, seed)
    try:
        _serve(conn, config, backend, devices)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        # The main process is gone (killed): there is nobody to report to, so end without a word.
        pass
    finally:
        try:
            # Through the engine's own API (vLLM's shutdown ends its processes); what survives it, the main
            # process ends with the group.
            backend.close()
        finally:
            conn.close()
    # Everything the worker started has ended. The interpreter's own teardown of torch and vLLM would take
    # seconds more (10 s seen on two busy cores) and free nothing that exiting does not.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve(
    conn: multiprocessing.connection.Connection,
    config: BackendConfig,
    backend: VllmPythonBatchBackend,
    devices: ReplicaDevices | None,
) -> None:
    try:
        if devices is not None:
            devices.apply()
        backend.validate()
    except Exception as error:
        conn.send(LoadFailed(f"{config.engine}: {type(error).__name__}: {error}"))
        return
    continuous = engine_entry(config.engine).continuous_dispatch
    if config.dispatch == "continuous" and not continuous:
        message = f"backend.dispatch=continuous: the {config.engine} engine cannot take requests while running"
        conn.send(LoadFailed(message))
        return
    engine = backend._ensure_engine()
    _settle_before_measuring()
    _leave_engine_cpus(engine.info)
    conn.send(Ready(engine.info, backend.load_seconds or 0.0))
    settings = Reconfigure(config.batch_size, config.batch_timeout, config.dispatch_mode)
    queue = _new_queue(settings)
    switch = _QueueSwitch(queue)
    reporter = Reporter(conn)
    receiver = threading.Thread(
        target=_receive_requests, args=(conn, switch, reporter, engine), name="batchmark-receiver", daemon=True
    )
    receiver.start()
    try:
        usage = HarnessUsage(engine.clock, [receiver, reporter.thread])
        # vLLM's LLM is not thread-safe: this thread alone calls the engine, in either mode. Each pass of the
        # loop feeds the engine by one set of settings until the receiver closes the queue: for a sweep's next
        # point (a new queue follows) or for good.
        while True:
            if settings.dispatch == STREAM_DISPATCH:
                dispatch_streams(cast(StreamingEngine, engine), cast(AdmissionQueue, queue), reporter, usage)
            elif isinstance(queue, AdmissionQueue):
                dispatch_continuously(cast(ContinuousEngine, engine), queue, reporter, settings.batch_size, usage)
            else:
                _dispatch_batches(cast(Engine, engine), cast(MicroBatcher[WorkItem], queue), reporter, usage)
            requested = switch.next_settings()
            if requested is None:
                return
            if requested.dispatch == "continuous" and not continuous:
                raise RuntimeError(
                    f"dispatch=continuous: the {config.engine} engine cannot take requests while running"
                )
            settings = requested
            queue = _new_queue(settings)
            switch.install(queue)
            # After the previous point's reports: both go through the reporter, in order.
            reporter.send(Reconfigured())
    except (BrokenPipeError, ConnectionResetError, EOFError):
        raise
    except EngineDead as died:
        # The main process prints the reason; the traceback would only show where the engine was waiting.
        reporter.send(Crashed("", reason=str(died)))
    except Exception:
        # Printed here for the log, and sent whole to the main process, which keeps its last line as the reason.
        traceback.print_exc()
        reporter.send(Crashed(traceback.format_exc()))
    finally:
        reporter.close()


def _settle_before_measuring() -> None:
    """Collect the garbage of loading the engine now, and keep what survives out of later collections.

    Loading imports torch, the tokenizer and the engine: hundreds of thousands of objects. The first full
    collection after that walks all of them, for a fifth of a second on this machine, and when it came due
    it came while the first batch was being built (the allocations of the first prompts triggered it),
    counted as idle engine time (benchmarks/notes/measurement-truth.md). Collected here and frozen (``gc.freeze``,
    as vLLM's own servers do after start-up), the loaded objects are never walked again; the benchmark's own
    garbage is collected as usual.
    """
    gc.collect()
    gc.freeze()


def _leave_engine_cpus(info: EngineInfo) -> None:
    """Move this process off the CPUs the engine bound itself to (dispatch/cpu_placement.py), and say where the
    harness runs in the engine's details, which the main process reads to follow."""
    placement = plan(group_members(os.getpid(), exclude=os.getpid()))
    if placement is None:
        return
    place_process(os.getpid(), placement.harness_cpus)
    info.details["engine_cpus"] = sorted(placement.engine_cpus)
    info.details["harness_cpus"] = sorted(placement.harness_cpus)


def _new_queue(settings: Reconfigure) -> RequestQueue[WorkItem]:
    if settings.dispatch in ("continuous", STREAM_DISPATCH):
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
    conn: multiprocessing.connection.Connection, switch: _QueueSwitch, reporter: Reporter, engine: Engine
) -> None:
    while True:
        try:
            message: ToWorker = conn.recv()
        except (EOFError, OSError):
            switch.current.close()
            return
        if isinstance(message, Submit):
            now = time.monotonic()
            # Prompts are built here, as requests arrive, so the engine thread goes from one engine call to the
            # next without building any. They join the queue a few at a time: the first batch of a burst need not
            # wait for the whole burst's prompts.
            requests = message.requests
            for first in range(0, len(requests), _PREPARE_CHUNK):
                chunk = requests[first : first + _PREPARE_CHUNK]
                switch.current.put([engine.prepare(WorkItem(spec, enqueued_at, now)) for spec, enqueued_at in chunk])
        elif isinstance(message, Drain):
            switch.current.drain()
            # After the drained batch's report: both go through the reporter, in order. If the main process is
            # gone, the reporter stops and the next receive here sees the pipe closed.
            reporter.send(Drained())
        elif isinstance(message, Reconfigure):
            switch.request(message)
        elif isinstance(message, Stop):
            switch.current.close()
            return


def _dispatch_batches(
    engine: Engine,
    batcher: MicroBatcher[WorkItem],
    reporter: Reporter,
    usage: HarnessUsage,
) -> None:
    """Between two engine calls this thread takes the next batch and matches the last one's outputs to its
    requests; prompts were built as requests arrived, and the report is pickled and sent by the reporter.

    Matching stays here because measurement said so (benchmarks/notes/measurement-truth.md): handed to another
    thread, it competes for the GIL at the very moment the next generate() starts, and the engine waited longer."""
    clock = engine.clock
    batch_id = 0
    carried = 0.0  # harness time spent after the previous report was handed over: counted in the next
    while (batch := batcher.next_batch()) is not None:
        started = time.monotonic()
        engine_before, steps_before = clock.seconds, clock.steps()
        try:
            completions = engine.run_batch(batch.items)
        except EngineDead:
            raise  # the run ends; the batch counts as incomplete
        except Exception as error:  # the engine itself broke: every request of the batch failed
            message = f"engine error: {type(error).__name__}: {error}"
            completions = [Completion(item.spec.request_id, 0, 0, message, NO_TIMINGS) for item in batch.items]
        finished = time.monotonic()
        engine_seconds = clock.seconds - engine_before
        reporter.send(
            BatchReport(
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
        )
        batcher.task_done()
        carried = time.monotonic() - finished
        batch_id += 1
