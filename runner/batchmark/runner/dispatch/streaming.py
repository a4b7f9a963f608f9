"""Stream dispatch (the async backend): every request submitted as it reaches the worker, its tokens read as they
come.

The engine thread runs an event loop. Requests are taken from the admission queue as they arrive (the wait for
them runs on a helper thread, so the loop keeps reading streams meanwhile) and each becomes one ``stream`` call:
nothing caps them, the engine's own scheduler queues what it cannot run yet, as vLLM's async engine does behind
a server. Completions go out in one report per turn of the loop, with every request that finished in it.

The engine runs elsewhere (vLLM's engine core in its own process; the simulated one as a task of this loop), so
its busy time is not seen from here: a report covers the time since the previous one while any request was in
flight, all of it counted as the engine's, and ``engine_batch`` is the requests in flight when it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from batchmark.runner.dispatch.continuous import AdmissionQueue
from batchmark.runner.dispatch.harness_usage import HarnessUsage
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.engines.base import Completion, WorkItem
from batchmark.runner.engines.streaming import StreamingEngine

# Take every waiting request at once: the engine, not the worker, decides what runs.
_ALL = 1 << 30


def dispatch_streams(
    engine: StreamingEngine, queue: AdmissionQueue, reporter: Reporter, usage: HarnessUsage | None = None
) -> None:
    """The engine thread: submit requests as they arrive and report them as their streams end, until the queue
    closes. Raises ``EngineDead`` when the engine is gone (what was in flight counts as incomplete)."""
    asyncio.run(_StreamDispatcher(engine, queue, reporter, usage).run())


class _StreamDispatcher:
    def __init__(
        self, engine: StreamingEngine, queue: AdmissionQueue, reporter: Reporter, usage: HarnessUsage | None
    ) -> None:
        self.engine = engine
        self.queue = queue
        self.reporter = reporter
        self.usage = usage
        self.in_flight: set[asyncio.Task[Completion]] = set()
        self.finished: list[tuple[Completion, float]] = []  # with when each entered the engine
        self.period_start: float | None = None
        self.report_id = 0
        # What ends the dispatch early: the engine's death, or the dispatcher's own error (the worker reports it
        # as a crash, with its traceback).
        self.failure: BaseException | None = None
        self.stopped = asyncio.Event()
        self._report_due = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                taking = loop.run_in_executor(None, self.queue.take, _ALL, True)
                stop = asyncio.ensure_future(self.stopped.wait())
                await asyncio.wait((taking, stop), return_when=asyncio.FIRST_COMPLETED)
                if self.failure is not None:
                    stop.cancel()
                    self.queue.close()  # ends the helper thread's wait
                    await taking
                    raise self.failure
                stop.cancel()
                items = await taking
                if items is None:
                    return
                now = time.monotonic()
                if self.period_start is None:
                    self.period_start = now
                for item in items:
                    self._submit(item, now)
        finally:
            for task in self.in_flight:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self.in_flight, return_exceptions=True)

    def _submit(self, item: WorkItem, entered: float) -> None:
        task = asyncio.ensure_future(self.engine.stream(item))
        self.in_flight.add(task)
        task.add_done_callback(lambda done: self._done(done, entered))

    def _done(self, task: asyncio.Task[Completion], entered: float) -> None:
        self.in_flight.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:  # a request's own failure is its completion's error: this is the engine's, or ours
            self.failure = self.failure or error
            self.stopped.set()
            return
        self.finished.append((task.result(), entered))
        if not self._report_due:
            self._report_due = True
            # After every stream that ends in this turn of the loop: one report for all of them.
            asyncio.get_running_loop().call_soon(self._report)

    def _report(self) -> None:
        self._report_due = False
        finished, self.finished = self.finished, []
        now = time.monotonic()
        began = self.period_start if self.period_start is not None else now
        running = len(self.in_flight)
        completions = [completion for completion, _ in finished]
        self.reporter.send(
            BatchReport(
                batch_id=self.report_id,
                full=False,
                closed_at=began,
                started_at=began,
                finished_at=now,
                completions=completions,
                queue_depth=len(self.queue),
                dispatched=[entered for _, entered in finished],
                engine_batch=running + len(completions),
                engine_seconds=now - began,
                harness_cpu=self.usage.cpu_seconds() if self.usage is not None else 0.0,
            )
        )
        self.report_id += 1
        self.period_start = now if running else None
        if not running:
            self.queue.task_done()
