"""What the dispatcher needs from an engine, and an adapter for anything with vLLM's ``LLM.generate``."""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from batchmark.runner.data import RequestSpec

NAN = math.nan


class WorkItem(NamedTuple):
    """A request inside the worker process; times are ``time.monotonic()`` readings."""

    spec: RequestSpec
    enqueued_at: float
    arrived_at: float


class EngineTimings(NamedTuple):
    """Differences of the engine's own timestamps, seconds; NaN where the engine gives none."""

    queued: float  # queued -> scheduled
    prefill: float  # scheduled -> first token
    decode: float  # first token -> last token
    to_first_token: float  # queued -> first token


NO_TIMINGS = EngineTimings(NAN, NAN, NAN, NAN)


class Completion(NamedTuple):
    """One request's outcome, as the engine reported it."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    error: str | None
    timings: EngineTimings


@dataclass
class EngineInfo:
    """Facts about a loaded engine, reported once per run."""

    kind: str  # "vllm" | "simulated"
    model: str
    version: str | None = None
    gpu_name: str | None = None
    max_model_len: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """A loaded engine that turns micro-batches of requests into completions, one batch at a time."""

    info: EngineInfo

    def run_batch(self, items: Sequence[WorkItem]) -> list[Completion]:
        """Run the batch; a request that fails fails alone, the rest complete."""
        ...

    def close(self) -> None:
        """Shut the engine down and end the processes it started."""
        ...


@runtime_checkable
class ContinuousEngine(Protocol):
    """An engine whose scheduler takes requests while it runs (continuous dispatch); one thread drives it."""

    info: EngineInfo

    def add(self, item: WorkItem) -> Completion | None:
        """Hand one request to the engine; a request the engine rejects comes back at once as failed."""
        ...

    def step(self) -> list[Completion]:
        """Run one engine step; returns the requests it finished."""
        ...

    def in_flight(self) -> int:
        """Requests added and not yet returned by ``step``."""
        ...

    def abort_all(self) -> list[Completion]:
        """Fail every request in flight (the engine broke); returns their completions."""
        ...


class PromptBuilder(Protocol):
    """Turns request specs into engine prompts; the key identifies the request in the engine's outputs."""

    def build(self, spec: RequestSpec) -> tuple[Any, Hashable]: ...

    def output_key(self, output: Any) -> Hashable: ...


def timings_from_metrics(metrics: Any) -> EngineTimings:
    """Read vLLM's ``RequestStateStats`` (monotonic timestamps: differences only)."""
    if metrics is None:
        return NO_TIMINGS
    queued = getattr(metrics, "queued_ts", 0.0) or 0.0
    scheduled = getattr(metrics, "scheduled_ts", 0.0) or 0.0
    first = getattr(metrics, "first_token_ts", 0.0) or 0.0
    last = getattr(metrics, "last_token_ts", 0.0) or 0.0
    if not (queued and scheduled and first):
        return NO_TIMINGS
    return EngineTimings(scheduled - queued, first - scheduled, (last - first) if last else NAN, first - queued)


class GenerateEngine:
    """Any object with vLLM's ``generate(prompts, sampling_params, use_tqdm=False)`` contract.

    Outputs are matched to requests by prompt key, not position. When ``generate`` raises for the whole
    call (as vLLM does when one prompt is invalid), the batch is split in halves and retried until every
    request that can complete has, and each bad one carries its own error.

    Where the object also has vLLM's ``llm_engine`` (``add_request``, ``step``), it serves continuous dispatch
    too: requests go in under our own ids (``str(request_id)``) and come back matched by them. vLLM's ``LLM``
    is not thread-safe, so the caller keeps every call on one thread. ``shutdown`` ends the engine (and the
    processes it started); ``close`` calls it once.
    """

    def __init__(
        self,
        llm: Any,
        prompts: PromptBuilder,
        sampling_params: Callable[[RequestSpec], Any],
        info: EngineInfo,
        shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.llm = llm
        self.prompts = prompts
        self.sampling_params = sampling_params
        self.info = info
        self._shutdown = shutdown
        self._pending: dict[str, WorkItem] = {}

    def close(self) -> None:
        shutdown, self._shutdown = self._shutdown, None
        if shutdown is not None:
            shutdown()

    # --- continuous dispatch: vLLM's LLMEngine step API ---

    def add(self, item: WorkItem) -> Completion | None:
        try:
            prompt, _ = self.prompts.build(item.spec)
        except Exception as error:  # a request that cannot be built fails alone
            return _failed(item, f"prompt: {error}")
        request_id = str(item.spec.request_id)
        try:
            # vLLM validates each request here (e.g. a prompt longer than max_model_len), so a bad one fails
            # alone and never enters the scheduler.
            self.llm.llm_engine.add_request(request_id, prompt, self.sampling_params(item.spec))
        except Exception as error:
            return _failed(item, f"{type(error).__name__}: {error}")
        self._pending[request_id] = item
        return None

    def step(self) -> list[Completion]:
        completions = []
        for output in self.llm.llm_engine.step():
            if not output.finished:
                continue
            item = self._pending.pop(str(output.request_id), None)
            if item is None:
                continue  # not one of ours (nothing else should add requests, but never guess by position)
            completions.append(completion_from_output(item.spec.request_id, output))
        return completions

    def in_flight(self) -> int:
        return len(self._pending)

    def abort_all(self) -> list[Completion]:
        message = "the engine failed while this request was in flight"
        failed = [_failed(item, message) for item in self._pending.values()]
        abort = getattr(self.llm.llm_engine, "abort_request", None)
        # The engine is already broken; its requests are reported failed whether or not the abort works.
        if abort is not None and self._pending:
            with contextlib.suppress(Exception):
                abort(list(self._pending))
        self._pending.clear()
        return failed

    def run_batch(self, items: Sequence[WorkItem]) -> list[Completion]:
        prepared: list[tuple[WorkItem, Any, Hashable]] = []
        completions: list[Completion] = []
        for item in items:
            try:
                prompt, key = self.prompts.build(item.spec)
            except Exception as error:  # a request that cannot be built fails alone
                completions.append(_failed(item, f"prompt: {error}"))
                continue
            prepared.append((item, prompt, key))
        completions.extend(self._generate_isolated(prepared))
        return completions

    def _generate_isolated(self, prepared: list[tuple[WorkItem, Any, Hashable]]) -> list[Completion]:
        if not prepared:
            return []
        try:
            outputs = self.llm.generate(
                [prompt for _, prompt, _ in prepared],
                [self.sampling_params(item.spec) for item, _, _ in prepared],
                use_tqdm=False,
            )
        except Exception as error:
            if len(prepared) == 1:
                return [_failed(prepared[0][0], f"{type(error).__name__}: {error}")]
            middle = len(prepared) // 2
            return self._generate_isolated(prepared[:middle]) + self._generate_isolated(prepared[middle:])
        return self._match(prepared, outputs)

    def _match(self, prepared: list[tuple[WorkItem, Any, Hashable]], outputs: Sequence[Any]) -> list[Completion]:
        by_key: defaultdict[Hashable, list[Any]] = defaultdict(list)
        for output in outputs:
            by_key[self.prompts.output_key(output)].append(output)
        completions = []
        for item, _, key in prepared:
            matches = by_key.get(key)
            if not matches:
                completions.append(_failed(item, "the engine returned no output for this request"))
                continue
            completions.append(completion_from_output(item.spec.request_id, matches.pop(0)))
        return completions


def completion_from_output(request_id: int, output: Any) -> Completion:
    """Turn a vLLM-shaped ``RequestOutput`` into a completion; error and abort finishes are failures."""
    completion = output.outputs[0] if output.outputs else None
    prompt_tokens = len(output.prompt_token_ids or ())
    output_tokens = len(completion.token_ids) if completion is not None else 0
    reason = completion.finish_reason if completion is not None else "error"
    error = None if reason not in ("error", "abort") else f"engine finished the request with {reason!r}"
    return Completion(request_id, prompt_tokens, output_tokens, error, timings_from_metrics(output.metrics))


def _failed(item: WorkItem, message: str) -> Completion:
    return Completion(item.spec.request_id, 0, 0, message, NO_TIMINGS)
