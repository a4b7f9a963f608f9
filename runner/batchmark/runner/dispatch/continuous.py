"""Continuous dispatch: one engine thread keeps vLLM's scheduler fed instead of waiting for micro-batches.

Requests join the engine as soon as they reach the worker, up to ``batch_size`` in flight (``batch_timeout``
is unused: nothing waits for a batch to fill). The thread alternates "add what waits" and one engine
``step()``; every step that finishes requests sends one report with them, so completion times are exact to
the step. Reports tile the time in which the engine had work without overlap — each covers from the end of the
previous one (or from when the engine went busy after being idle) to its own step's end — and carry the seconds
spent inside ``step()`` in that span, which is all engine utilisation counts, as it counts only ``generate()``
in batch mode; the rest of the span (adding requests, matching outputs, reporting) is dispatch overhead.
"""

from __future__ import annotations

import time

from batchmark.runner.dispatch.batcher import RequestQueue
from batchmark.runner.dispatch.harness_usage import HarnessUsage
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.engines.base import Completion, ContinuousEngine, EngineDead, WorkItem


class AdmissionQueue(RequestQueue[WorkItem]):
    """Requests waiting for a seat in the engine; busy while the engine has any in flight."""

    def take(self, limit: int, block: bool) -> list[WorkItem] | None:
        """Up to ``limit`` waiting requests; with ``block``, wait for at least one. None once closed."""
        if limit <= 0 and not block and not self._closed:
            # Every seat is taken, as at most steps: nothing to take, so no lock. Reading the flag unlocked
            # can miss a close by one step; the next step sees it.
            return []
        with self._condition:
            while block and not self._queue and not self._closed:
                self._condition.wait()
            if self._closed:
                return None
            taken = [self._queue.popleft()[1] for _ in range(min(limit, len(self._queue)))]
            if taken:
                self._busy = True
            return taken


# One function on purpose: its loop runs between every two engine steps, and what it keeps (seats, the marks of
# the last report, the busy period) lives in locals and one closure, not behind calls: each call there is paid
# at every step (benchmarks/continuous_step_cost.py measures that cost).
def dispatch_continuously(  # noqa: PLR0915
    engine: ContinuousEngine,
    queue: AdmissionQueue,
    reporter: Reporter,
    max_in_flight: int,
    usage: HarnessUsage | None = None,
) -> None:
    """The engine thread: add waiting requests while seats are free, step, report what finished."""
    clock = engine.clock
    report_id = 0
    dispatched: dict[int, float] = {}  # request id -> when it entered the engine
    period_start: float | None = None  # start of the busy time the next report covers
    engine_mark, steps_mark = clock.seconds, clock.steps()  # the engine's time and steps reported so far

    def send(completions: list[Completion], now: float, began: float, running: int) -> None:
        nonlocal report_id, engine_mark, steps_mark
        engine_seconds, steps = clock.seconds - engine_mark, clock.steps() - steps_mark
        engine_mark, steps_mark = clock.seconds, clock.steps()
        report = BatchReport(
            batch_id=report_id,
            full=engine.in_flight() + len(completions) >= max_in_flight,
            closed_at=began,
            started_at=began,
            finished_at=now,
            completions=completions,
            queue_depth=len(queue),
            dispatched=[dispatched.pop(c.request_id, began) for c in completions],
            engine_batch=running,
            engine_seconds=engine_seconds,
            overhead_seconds=max(0.0, now - began - engine_seconds),
            steps=steps,
            harness_cpu=usage.cpu_seconds() if usage is not None else 0.0,
        )
        reporter.send(report)
        report_id += 1

    # This loop runs once per engine step, and after each step on cold caches: it does as little as it can.
    rejected: list[Completion] = []  # refused as they were added; reported with this pass's step, then emptied
    running = 0  # requests in the engine
    while True:
        items = queue.take(max_in_flight - running, block=running == 0)
        if items is None:
            return
        if items:
            for item in items:
                now = time.monotonic()
                if period_start is None:
                    period_start = now
                dispatched[item.spec.request_id] = now
                failure = engine.add(item)
                if failure is not None:
                    rejected.append(failure)
            running = engine.in_flight()
        if running == 0:
            # Only rejected requests (or nothing): report them, the engine stays idle.
            if rejected and period_start is not None:
                send(rejected, time.monotonic(), period_start, running=0)
            rejected, period_start = [], None
            queue.task_done()
            continue
        try:
            finished = engine.step()
        except EngineDead:
            raise  # the run ends; what was in flight counts as incomplete
        except Exception as error:  # the engine itself broke: everything in flight failed
            finished = engine.abort_all()
            message = f"engine error: {type(error).__name__}: {error}"
            finished = [c._replace(error=message) for c in finished]
        if rejected:
            finished, rejected = rejected + finished, []
        if finished:
            now = time.monotonic()
            assert period_start is not None
            send(finished, now, period_start, running)
            running = engine.in_flight()
            period_start = now if running else None
            if running == 0:
                queue.task_done()
