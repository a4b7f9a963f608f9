"""The messages between the run's main process and its engine worker process, one type per message.

Both sides import this module and nothing of each other, so the dispatchers (batch and continuous) and the
consumers of their reports (the aggregator, the observers) depend on these types only.
"""

from __future__ import annotations

from typing import NamedTuple

from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import Completion, EngineInfo

# --- main process -> worker ---------------------------------------------------------------------------------


class Submit(NamedTuple):
    """Requests to queue, each with its ``time.monotonic()`` enqueue time in the main process."""

    requests: list[tuple[RequestSpec, float]]


class Drain(NamedTuple):
    """Drop the queued requests, finish the batch in progress, then answer ``Drained``."""


class Stop(NamedTuple):
    """Close the queue and end the worker."""


class Reconfigure(NamedTuple):
    """Feed the loaded engine differently from now on (a sweep point); sent only when nothing is in flight."""

    batch_size: int
    batch_timeout: float
    dispatch: str


ToWorker = Submit | Drain | Stop | Reconfigure


# --- worker -> main process ---------------------------------------------------------------------------------


class Ready(NamedTuple):
    """The engine is loaded; ``load_seconds`` stays out of every timed phase."""

    info: EngineInfo
    load_seconds: float


class LoadFailed(NamedTuple):
    """The engine could not be loaded (or cannot serve the chosen dispatch); the worker has ended."""

    message: str


class Crashed(NamedTuple):
    """The dispatcher itself broke; carries the worker's traceback, or the reason alone where the engine died
    (a known end, for which a traceback says nothing more)."""

    traceback: str
    reason: str = ""


class Drained(NamedTuple):
    """Every report of the batch in progress at ``Drain`` time has been sent."""


class Reconfigured(NamedTuple):
    """The worker now feeds the engine by the ``Reconfigure`` settings; the engine was not touched."""


class BatchReport(NamedTuple):
    """One finished micro-batch (or, in continuous dispatch, one engine step), timed on ``time.monotonic()``."""

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
    # bookkeeping, handing the previous report over. The engine is idle for all of it.
    overhead_seconds: float = 0.0
    steps: int = 0  # engine steps the report covers
    # CPU seconds the worker's own threads have spent since the engine was ready, excluding the engine's calls.
    harness_cpu: float = 0.0
    # Which of the run's engine replicas sent it (backend.replicas); set by the main process as it arrives.
    replica: int = 0

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


FromWorker = Ready | LoadFailed | Crashed | Drained | Reconfigured | BatchReport
