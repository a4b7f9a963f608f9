"""What the async backend needs from an engine, and an adapter for anything with vLLM's ``AsyncLLM.generate``.

The async backend (``kind=vllm_python_async``, GuideLLM's sibling of the batch backend) submits each request
when the load generator issues it and reads its output as a stream: vLLM schedules the requests itself, and
the first token, every interval between tokens and the end are measured where the tokens arrive.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, runtime_checkable

from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import (
    NO_TIMINGS,
    Completion,
    EngineClock,
    EngineDead,
    EngineInfo,
    PromptBuilder,
    TokenTimes,
    WorkItem,
    failed_completion,
    prepare_request,
    timings_from_metrics,
)


@runtime_checkable
class StreamingEngine(Protocol):
    """A loaded engine that takes requests one at a time, concurrently, and streams their tokens back.

    ``stream`` runs on the engine thread's event loop; every request in flight is one of its calls."""

    info: EngineInfo
    clock: EngineClock

    def prepare(self, item: WorkItem) -> WorkItem:
        """Build the request's prompt and parameters now (any thread); a failure is recorded, never raised."""
        ...

    async def stream(self, item: WorkItem) -> Completion:
        """Submit the request and read its output to the end; a request that fails fails alone. Raises
        ``EngineDead`` when the engine itself is gone."""
        ...

    def close(self) -> None:
        """Shut the engine down and end the processes it started."""
        ...


class StreamReader:
    """Times one request's stream of deltas as they arrive: the first token, the last, each interval."""

    __slots__ = ("first", "intervals", "last", "tokens")

    def __init__(self) -> None:
        self.first = 0.0
        self.last = 0.0
        self.tokens = 0
        self.intervals: list[float] = []

    def arrived(self, tokens: int, now: float) -> None:
        """``tokens`` new output tokens read at ``now``."""
        if tokens <= 0:
            return
        if self.tokens == 0:
            self.first = now
            # Tokens that came with the first one came at the same moment, as far as the reader can tell.
            self.intervals.extend([0.0] * (tokens - 1))
        else:
            gap = (now - self.last) / tokens
            self.intervals.extend([gap] * tokens)
        self.tokens += tokens
        self.last = now

    def times(self) -> TokenTimes | None:
        return TokenTimes(self.first, self.last, self.intervals) if self.tokens else None


class AsyncGenerateEngine:
    """Any object with vLLM's ``AsyncLLM.generate(prompt, sampling_params, request_id)`` contract, whose
    sampling parameters ask for deltas (``RequestOutputKind.DELTA``): each output carries the tokens new since
    the previous one.

    ``engine_input`` turns a prompt into the typed form ``generate`` takes (None: as built); ``shutdown`` ends the
    engine and its processes; ``death`` says, once a call has raised, whether the engine has died (then
    ``EngineDead`` ends the run instead of failing the request).
    """

    def __init__(
        self,
        llm: Any,
        prompts: PromptBuilder,
        sampling_params: Callable[[RequestSpec], Any],
        info: EngineInfo,
        engine_input: Callable[[Any], Any] | None = None,
        shutdown: Callable[[], None] | None = None,
        death: Callable[[], EngineDead | None] | None = None,
    ) -> None:
        self.llm = llm
        self.prompts = prompts
        self.sampling_params = sampling_params
        self.info = info
        self.clock = EngineClock()
        self.engine_input = engine_input
        self._shutdown = shutdown
        self._death = death

    def prepare(self, item: WorkItem) -> WorkItem:
        return prepare_request(item, self.prompts, self.sampling_params)

    async def stream(self, item: WorkItem) -> Completion:
        item = self.prepare(item)
        if item.prepared is None:
            return failed_completion(item, item.failure or "prompt: not built")
        reader = StreamReader()
        prompt_tokens = 0
        last: Any = None
        try:
            prompt = item.prepared.prompt
            typed = self.engine_input(prompt) if self.engine_input is not None else prompt
            outputs: AsyncIterator[Any] = self.llm.generate(typed, item.prepared.params, str(item.spec.request_id))
            async for output in outputs:
                completion = output.outputs[0] if output.outputs else None
                reader.arrived(len(completion.token_ids) if completion is not None else 0, time.monotonic())
                prompt_tokens = max(prompt_tokens, len(output.prompt_token_ids or ()))
                last = output
        except EngineDead:
            raise
        except Exception as error:
            died = self._death() if self._death is not None else None
            if died is not None:
                raise died from error
            return failed_completion(item, f"{type(error).__name__}: {error}")
        finish = last.outputs[0].finish_reason if last is not None and last.outputs else "error"
        failure = None if finish not in ("error", "abort") else f"engine finished the request with {finish!r}"
        timings = timings_from_metrics(last.metrics) if last is not None else NO_TIMINGS
        return Completion(item.spec.request_id, prompt_tokens, reader.tokens, failure, timings, reader.times())

    def close(self) -> None:
        shutdown, self._shutdown = self._shutdown, None
        if shutdown is not None:
            shutdown()
