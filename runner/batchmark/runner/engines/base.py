"""What the dispatcher needs from an engine, and an adapter for anything with vLLM's ``LLM.generate``."""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from batchmark.runner.data.requests import RequestSpec

NAN = math.nan


class Prepared(NamedTuple):
    """A request in the engine's own terms, built when the request reaches the worker (off the critical path
    between two engine calls)."""

    prompt: Any
    key: Hashable  # identifies the request's output among a generate() call's outputs
    params: Any  # the engine's sampling parameters


class WorkItem(NamedTuple):
    """A request inside the worker process; times are ``time.monotonic()`` readings."""

    spec: RequestSpec
    enqueued_at: float
    arrived_at: float
    prepared: Prepared | None = None  # None: not built yet (the engine builds it when it runs the request)
    failure: str | None = None  # building it failed: the request fails alone, without reaching the engine


class EngineClock:
    """Time inside the engine's own calls (``generate()``, ``step()``), as the thread making them sees it.

    Everything else the dispatching thread does (taking a batch, matching outputs, reporting) is the harness's
    time, during which the engine does nothing; engine utilisation counts only what is measured here.
    ``cpu_seconds`` is the calling thread's CPU inside the calls: the engine's, never the harness's.

    ``with clock:`` times one call. A class rather than a generator-based context manager: continuous dispatch
    enters it at every engine step, and after each step the thread runs on cold caches, where a generator's
    machinery was measured at about 10 µs a step (benchmarks/notes/harness-contention.md).
    """

    def __init__(self, steps: Callable[[], int] | None = None) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.last_started = 0.0
        self._cpu_at_start = 0.0
        self._steps = steps

    def __enter__(self) -> None:
        self.last_started = time.monotonic()
        self._cpu_at_start = time.thread_time()

    def __exit__(self, *exception: object) -> None:
        self.cpu_seconds += time.thread_time() - self._cpu_at_start
        self.seconds += time.monotonic() - self.last_started
        self.calls += 1

    def steps(self) -> int:
        """Engine steps run so far (0 where the engine does not say)."""
        return self._steps() if self._steps is not None else 0


class EngineTimings(NamedTuple):
    """Differences of the engine's own timestamps, seconds; NaN where the engine gives none."""

    queued: float  # queued -> scheduled
    prefill: float  # scheduled -> first token
    decode: float  # first token -> last token
    to_first_token: float  # queued -> first token


NO_TIMINGS = EngineTimings(NAN, NAN, NAN, NAN)


class TokenTimes(NamedTuple):
    """A streamed request's output as its reader saw it arrive, on ``time.monotonic()``: the first token, the
    last, and the interval before each output token after the first (one per token: a delta that brought k
    tokens gives each the k-th part of its gap)."""

    first: float
    last: float
    intervals: list[float]


class Completion(NamedTuple):
    """One request's outcome, as the engine reported it."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    error: str | None
    timings: EngineTimings
    stream: TokenTimes | None = None  # streamed (the async backend): its tokens' times at the reader

    def time_to_first_token(self, enqueued_at: float, entered_at: float) -> float:
        """Enqueue to first token: where the stream delivered it, else by the engine's own timings from when the
        request entered it; NaN where neither says."""
        if self.stream is not None:
            return self.stream.first - enqueued_at
        return entered_at - enqueued_at + self.timings.to_first_token

    def time_per_output_token(self) -> float:
        """First to last token over the tokens after the first, by the stream or else the engine's timings; NaN
        with one output token or no timings."""
        if self.output_tokens < 2:
            return NAN
        decode = self.stream.last - self.stream.first if self.stream is not None else self.timings.decode
        return decode / (self.output_tokens - 1)


@dataclass
class EngineInfo:
    """Facts about a loaded engine, reported once per run."""

    kind: str  # its name in the registry (engines/registry.py)
    model: str
    version: str | None = None
    gpu_name: str | None = None
    max_model_len: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """A loaded engine that turns micro-batches of requests into completions, one batch at a time."""

    info: EngineInfo
    clock: EngineClock

    def prepare(self, item: WorkItem) -> WorkItem:
        """Build the request's prompt and parameters now (any thread); a failure is recorded, never raised."""
        ...

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
    clock: EngineClock

    def prepare(self, item: WorkItem) -> WorkItem:
        """Build the request's prompt and parameters now (any thread); a failure is recorded, never raised."""
        ...

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


class EngineDead(RuntimeError):
    """The engine itself is gone (its process died): no later call can succeed, so the run ends with this
    message instead of failing every request that follows."""


class GenerateEngine:
    """Any object with vLLM's ``generate(prompts, sampling_params, use_tqdm=False)`` contract.

    Outputs are matched to requests by prompt key, not position. When ``generate`` raises for the whole
    call (as vLLM does when one prompt is invalid), the batch is split in halves and retried until every
    request that can complete has, and each bad one carries its own error.

    Where the object also has vLLM's ``llm_engine`` (``add_request``, ``step``), it serves continuous dispatch
    too: requests go in under our own ids (``str(request_id)``) and come back matched by them. vLLM's ``LLM``
    is not thread-safe, so the caller keeps every engine call on one thread; ``prepare`` touches only the
    prompt builder and may run on another. ``engine_input`` turns a prompt into the typed form ``add_request``
    takes (vLLM 0.32 deprecates raw prompts there); None passes prompts as built. ``shutdown`` ends the engine
    (and the processes it started); ``close`` calls it once. ``death`` says, once an engine call has raised,
    whether the engine has died: then ``EngineDead`` is raised instead of the call's own error.
    """

    def __init__(
        self,
        llm: Any,
        prompts: PromptBuilder,
        sampling_params: Callable[[RequestSpec], Any],
        info: EngineInfo,
        steps: Callable[[], int] | None = None,
        engine_input: Callable[[Any], Any] | None = None,
        shutdown: Callable[[], None] | None = None,
        death: Callable[[], EngineDead | None] | None = None,
    ) -> None:
        self.llm = llm
        self.prompts = prompts
        self.sampling_params = sampling_params
        self.info = info
        self.clock = EngineClock(steps)
        self.engine_input = engine_input
        self._shutdown = shutdown
        self._death = death
        self._pending: dict[str, WorkItem] = {}

    def _raise_if_dead(self, error: Exception) -> None:
        """Called with an engine call's error: a dead engine ends the run, anything else fails the request."""
        died = self._death() if self._death is not None else None
        if died is not None:
            raise died from error

    def close(self) -> None:
        shutdown, self._shutdown = self._shutdown, None
        if shutdown is not None:
            shutdown()

    def prepare(self, item: WorkItem) -> WorkItem:
        return prepare_request(item, self.prompts, self.sampling_params)

    # --- continuous dispatch: vLLM's LLMEngine step API ---

    def add(self, item: WorkItem) -> Completion | None:
        item = self.prepare(item)
        if item.prepared is None:
            return failed_completion(item, item.failure or "prompt: not built")
        request_id = str(item.spec.request_id)
        try:
            # vLLM validates each request here (e.g. a prompt longer than max_model_len), so a bad one fails
            # alone and never enters the scheduler.
            prompt = item.prepared.prompt
            typed = self.engine_input(prompt) if self.engine_input is not None else prompt
            self.llm.llm_engine.add_request(request_id, typed, item.prepared.params)
        except Exception as error:
            self._raise_if_dead(error)
            return failed_completion(item, f"{type(error).__name__}: {error}")
        self._pending[request_id] = item
        return None

    def step(self) -> list[Completion]:
        try:
            with self.clock:
                outputs = self.llm.llm_engine.step()
        except Exception as error:
            self._raise_if_dead(error)
            raise
        completions = []
        for output in outputs:
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
        failed = [failed_completion(item, message) for item in self._pending.values()]
        abort = getattr(self.llm.llm_engine, "abort_request", None)
        # The engine is already broken; its requests are reported failed whether or not the abort works.
        if abort is not None and self._pending:
            with contextlib.suppress(Exception):
                abort(list(self._pending))
        self._pending.clear()
        return failed

    def run_batch(self, items: Sequence[WorkItem]) -> list[Completion]:
        return self.generate_batch(items)()

    def generate_batch(self, items: Sequence[WorkItem]) -> Callable[[], list[Completion]]:
        """Run the batch through the engine now; the function returned turns its outputs into completions
        (``run_batch`` is the two at once)."""
        prepared: list[tuple[WorkItem, Prepared]] = []
        failed: list[Completion] = []
        for ready in map(self.prepare, items):
            if ready.prepared is None:
                failed.append(failed_completion(ready, ready.failure or "prompt: not built"))
                continue
            prepared.append((ready, ready.prepared))
        results: list[tuple[list[tuple[WorkItem, Prepared]], Sequence[Any]] | Completion] = []
        self._generate_isolated(prepared, results)

        def convert() -> list[Completion]:
            completions = list(failed)
            for result in results:
                if isinstance(result, Completion):
                    completions.append(result)
                else:
                    completions.extend(self._match(*result))
            return completions

        return convert

    def _generate_isolated(
        self,
        prepared: list[tuple[WorkItem, Prepared]],
        results: list[tuple[list[tuple[WorkItem, Prepared]], Sequence[Any]] | Completion],
    ) -> None:
        """Appends (requests, their outputs) per successful generate() call, or a failed request's completion."""
        if not prepared:
            return
        prompts = [request.prompt for _, request in prepared]
        params = [request.params for _, request in prepared]
        try:
            with self.clock:
                outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as error:
            self._raise_if_dead(error)  # not split: a dead engine fails every half alike
            if len(prepared) == 1:
                results.append(failed_completion(prepared[0][0], f"{type(error).__name__}: {error}"))
                return
            middle = len(prepared) // 2
            self._generate_isolated(prepared[:middle], results)
            self._generate_isolated(prepared[middle:], results)
            return
        results.append((prepared, outputs))

    def _match(self, prepared: list[tuple[WorkItem, Prepared]], outputs: Sequence[Any]) -> list[Completion]:
        output_key = self.prompts.output_key
        # vLLM returns the outputs in the order of the prompts; checked output by output (a comparison, no
        # hashing), and matched by key only where the order does not hold.
        if len(outputs) == len(prepared) and all(
            output_key(output) == request.key for output, (_, request) in zip(outputs, prepared, strict=True)
        ):
            return [
                completion_from_output(item.spec.request_id, output)
                for output, (item, _) in zip(outputs, prepared, strict=True)
            ]
        by_key: defaultdict[Hashable, list[Any]] = defaultdict(list)
        for output in outputs:
            by_key[output_key(output)].append(output)
        completions = []
        for item, request in prepared:
            matches = by_key.get(request.key)
            if not matches:
                completions.append(failed_completion(item, "the engine returned no output for this request"))
                continue
            completions.append(completion_from_output(item.spec.request_id, matches.pop(0)))
        return completions


def prepare_request(item: WorkItem, prompts: PromptBuilder, sampling_params: Callable[[RequestSpec], Any]) -> WorkItem:
    """The request with its prompt and parameters built (once); a request that cannot be built fails alone."""
    if item.prepared is not None or item.failure is not None:
        return item
    try:
        prompt, key = prompts.build(item.spec)
        params = sampling_params(item.spec)
    except Exception as error:
        return item._replace(failure=f"prompt: {error}")
    return item._replace(prepared=Prepared(prompt, key, params))


def completion_from_output(request_id: int, output: Any) -> Completion:
    """Turn a vLLM-shaped ``RequestOutput`` into a completion; error and abort finishes are failures."""
    completion = output.outputs[0] if output.outputs else None
    prompt_tokens = len(output.prompt_token_ids or ())
    output_tokens = len(completion.token_ids) if completion is not None else 0
    reason = completion.finish_reason if completion is not None else "error"
    error = None if reason not in ("error", "abort") else f"engine finished the request with {reason!r}"
    return Completion(request_id, prompt_tokens, output_tokens, error, timings_from_metrics(output.metrics))


def failed_completion(item: WorkItem, message: str) -> Completion:
    """The completion of a request that failed before (or without) the engine's output."""
    return Completion(item.spec.request_id, 0, 0, message, NO_TIMINGS)
