"""The async backend's engine adapter: a stream's tokens timed where they arrive, a bad request failing alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import EngineDead, EngineInfo, WorkItem
from batchmark.runner.engines.simulated_engine import load_simulated_streaming_engine
from batchmark.runner.engines.streaming import AsyncGenerateEngine, StreamReader


def test_the_reader_gives_each_token_after_the_first_its_share_of_the_gap() -> None:
    reader = StreamReader()
    reader.arrived(1, 10.0)
    reader.arrived(1, 10.5)
    reader.arrived(3, 11.4)  # three tokens came together, 0.9 s after the last: 0.3 s each
    reader.arrived(0, 12.0)  # an output with no new token changes nothing
    times = reader.times()
    assert times is not None
    assert (times.first, times.last) == (10.0, 11.4)
    assert times.intervals == pytest.approx([0.5, 0.3, 0.3, 0.3])
    assert reader.tokens == 5 == len(times.intervals) + 1


def test_tokens_that_come_with_the_first_have_no_gap_before_them() -> None:
    reader = StreamReader()
    reader.arrived(2, 1.0)
    assert reader.times() == (1.0, 1.0, [0.0])
    assert StreamReader().times() is None


def spec(index: int, prompt_tokens: int = 16, output_tokens: int = 6) -> RequestSpec:
    return RequestSpec(index, prompt_tokens, output_tokens, -1, 0)


def test_a_streamed_request_on_the_simulated_engine_reports_every_interval() -> None:
    config = BackendConfig(kind="vllm_python_async", model="m", engine="simulated", simulation={"time_scale": 0})
    engine = load_simulated_streaming_engine(config, seed=1)

    async def main() -> list[Any]:
        return await asyncio.gather(*(engine.stream(WorkItem(spec(index), 0.0, 0.0)) for index in range(4)))

    completions = asyncio.run(main())
    engine.close()
    for index, completion in enumerate(completions):
        assert completion.request_id == index
        assert completion.error is None
        assert (completion.prompt_tokens, completion.output_tokens) == (16, 6)
        assert completion.stream is not None
        assert len(completion.stream.intervals) == 5
        assert completion.stream.first <= completion.stream.last
        # vLLM's per-request stats are kept beside the stream's (the simulated engine has them on by default).
        assert completion.timings.to_first_token >= 0


class Failing:
    """``AsyncLLM.generate`` that refuses one prompt, or dies."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def generate(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[Any]:
        if request_id == "1":
            raise self.error
        yield SimpleNamespace(
            prompt_token_ids=[1, 2],
            outputs=[SimpleNamespace(token_ids=[5], finish_reason="length")],
            finished=True,
            metrics=None,
        )


def stand_in(llm: Any, death: Any = None) -> AsyncGenerateEngine:
    prompts = SimpleNamespace(build=lambda spec: ([1, 2], spec.request_id), output_key=lambda output: None)
    return AsyncGenerateEngine(llm, prompts, lambda spec: None, EngineInfo(kind="x", model="m"), death=death)


def test_a_request_the_engine_refuses_fails_alone() -> None:
    engine = stand_in(Failing(ValueError("prompt too long")))

    async def main() -> list[Any]:
        return await asyncio.gather(*(engine.stream(WorkItem(spec(index), 0.0, 0.0)) for index in range(3)))

    completions = asyncio.run(main())
    assert completions[1].error == "ValueError: prompt too long"
    assert completions[1].stream is None
    assert [completions[0].error, completions[2].error] == [None, None]
    assert completions[0].output_tokens == 1
    assert completions[0].stream is not None


def test_a_dead_engine_ends_the_run_instead_of_failing_the_request() -> None:
    engine = stand_in(RuntimeError("engine core gone"), death=lambda: EngineDead("the engine core died"))
    with pytest.raises(EngineDead, match="the engine core died"):
        asyncio.run(engine.stream(WorkItem(spec(1), 0.0, 0.0)))
