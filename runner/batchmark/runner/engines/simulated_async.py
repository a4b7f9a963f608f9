"""vLLM's ``AsyncLLM`` contract on the simulated engine's cost model: requests streamed token by token.

``generate(prompt, sampling_params, request_id)`` is an async generator of ``RequestOutput``s, as vLLM's is:
deltas with ``RequestOutputKind.DELTA``, every token so far with ``CUMULATIVE``, one output with ``FINAL_ONLY``.
A core task on the caller's event loop stands in for vLLM's engine-core process: it steps a
``SimulatedLLMEngine`` (simulated.py: the step API's scheduler state, its clock made not to sleep) and, after
each step, waits until wall time has caught up with the step's modelled end (scaled by ``time_scale``; with 0 it
only yields) before handing the step's tokens to the streams, so a reader sees each token when a real engine would
have sent it. Idle time passes for the engine
too: a request that arrives after a pause is scheduled at its arrival.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from batchmark.runner.engines.simulated import (
    _FILLER_TOKEN,
    CompletionOutput,
    RequestOutput,
    RequestOutputKind,
    SamplingParams,
    SimulatedLLM,
    SimulatedLLMEngine,
    TokensPrompt,
    _Clock,
    _Sequence,
)


class _PacedClock(_Clock):
    """The simulated clock without sleeping: the core task waits for wall time itself, on the event loop."""

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Stream:
    sequence: _Sequence
    kind: RequestOutputKind
    outputs: asyncio.Queue[RequestOutput] = field(default_factory=asyncio.Queue)
    sent: int = 0  # tokens handed to the reader so far


class SimulatedAsyncLLM:
    """Stands in for ``vllm.v1.engine.async_llm.AsyncLLM`` over a ``SimulatedLLM``'s model and limits."""

    def __init__(self, llm: SimulatedLLM) -> None:
        self._llm = llm
        self._engine = SimulatedLLMEngine(llm, _PacedClock(wall_start=time.monotonic(), time_scale=llm.time_scale))
        self._streams: dict[int, _Stream] = {}  # id(sequence) -> its stream
        self._core: asyncio.Task[None] | None = None
        self._work: asyncio.Event | None = None

    @property
    def steps(self) -> int:
        return self._llm.steps

    async def generate(
        self, prompt: TokensPrompt, sampling_params: SamplingParams, request_id: str
    ) -> AsyncGenerator[RequestOutput, None]:
        """Queue the request and yield its outputs; an invalid prompt raises here, for that request alone."""
        sequence = self._engine.queue(request_id, prompt, sampling_params)
        stream = _Stream(sequence, sampling_params.output_kind)
        self._streams[id(sequence)] = stream
        self._start_core()
        finished = False
        try:
            while not finished:
                output = await stream.outputs.get()
                finished = output.finished
                yield output
        finally:
            if not finished:
                # The reader went away (cancelled): the engine drops the request.
                self._engine.abort_request([request_id])
            self._streams.pop(id(sequence), None)

    def shutdown(self) -> None:
        if self._core is not None:
            self._core.cancel()
            self._core = None

    def _start_core(self) -> None:
        if self._work is None:
            self._work = asyncio.Event()
        if self._core is None or self._core.done():
            self._core = asyncio.get_running_loop().create_task(self._run_core(self._work))
        self._work.set()

    async def _run_core(self, work: asyncio.Event) -> None:
        while True:
            if not self._engine.has_unfinished_requests():
                work.clear()
                await work.wait()
                continue
            ends = self._engine.advance()
            # Each step's tokens reach the readers when the modelled step ends, not before.
            await asyncio.sleep(max(0.0, ends - time.monotonic()))
            for stream in list(self._streams.values()):
                self._send(stream)

    def _send(self, stream: _Stream) -> None:
        sequence = stream.sequence
        new = sequence.generated - stream.sent
        if new <= 0:
            return
        finished = sequence.generated >= sequence.max_tokens
        if stream.kind == RequestOutputKind.FINAL_ONLY and not finished:
            return
        tokens = new if stream.kind == RequestOutputKind.DELTA else sequence.generated
        stream.sent = sequence.generated
        stream.outputs.put_nowait(
            RequestOutput(
                request_id=sequence.request_id,
                prompt=None,
                prompt_token_ids=sequence.prompt_token_ids,
                prompt_logprobs=None,
                outputs=[
                    CompletionOutput(
                        index=0,
                        text="",
                        token_ids=[_FILLER_TOKEN] * tokens,
                        finish_reason="length" if finished else None,
                    )
                ],
                finished=finished,
                metrics=self._engine.stats(sequence) if finished and self._llm.log_stats else None,
            )
        )
