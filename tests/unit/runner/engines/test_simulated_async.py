"""The simulated engine behind vLLM's AsyncLLM contract: requests streamed token by token on the cost model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from batchmark.runner.engines.simulated import RequestOutputKind, SamplingParams, SimulatedLLM, TokensPrompt
from batchmark.runner.engines.simulated_async import SimulatedAsyncLLM


def prompt(length: int) -> TokensPrompt:
    return TokensPrompt(prompt_token_ids=[7] * length)


def params(tokens: int, kind: RequestOutputKind = RequestOutputKind.DELTA) -> SamplingParams:
    return SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, output_kind=kind)


def engine(**overrides: Any) -> SimulatedAsyncLLM:
    return SimulatedAsyncLLM(SimulatedLLM(model="m", **{"time_scale": 0.0, **overrides}))


async def collect(llm: SimulatedAsyncLLM, length: int, tokens: int, request_id: str, **kind: Any) -> list[Any]:
    return [output async for output in llm.generate(prompt(length), params(tokens, **kind), request_id)]


def test_deltas_carry_each_new_token_once_and_the_last_one_finishes_with_the_stats() -> None:
    llm = engine()

    async def main() -> tuple[list[Any], list[Any]]:
        return await asyncio.gather(collect(llm, 16, 5, "a"), collect(llm, 40, 9, "b"))

    first, second = asyncio.run(main())
    for outputs, tokens in ((first, 5), (second, 9)):
        # One step per token once the prompt is in: one delta per token, one token each.
        assert [len(output.outputs[0].token_ids) for output in outputs] == [1] * tokens
        assert [output.finished for output in outputs] == [False] * (tokens - 1) + [True]
        assert outputs[-1].outputs[0].finish_reason == "length"
        assert all(output.metrics is None for output in outputs[:-1])
        stats = outputs[-1].metrics
        assert stats.queued_ts <= stats.scheduled_ts <= stats.first_token_ts <= stats.last_token_ts
    assert first[0].prompt_token_ids == [7] * 16


def test_cumulative_and_final_only_outputs_as_vllm_gives_them() -> None:
    llm = engine()

    async def main() -> tuple[list[Any], list[Any]]:
        return (
            await collect(llm, 8, 4, "c", kind=RequestOutputKind.CUMULATIVE),
            await collect(llm, 8, 4, "f", kind=RequestOutputKind.FINAL_ONLY),
        )

    cumulative, final = asyncio.run(main())
    assert [len(output.outputs[0].token_ids) for output in cumulative] == [1, 2, 3, 4]
    assert len(final) == 1
    assert len(final[0].outputs[0].token_ids) == 4
    assert final[0].finished


def test_requests_share_the_engine_steps_as_continuous_batching_does() -> None:
    llm = engine()

    async def main() -> None:
        await asyncio.gather(*(collect(llm, 8, 10, str(index)) for index in range(8)))

    asyncio.run(main())
    # Eight requests of 10 tokens that start together run side by side: 10 steps, not 80.
    assert llm.steps == 10


def test_a_prompt_longer_than_the_context_fails_alone_at_submission() -> None:
    llm = engine(max_model_len=32)

    async def main() -> tuple[BaseException | list[Any], ...]:
        return tuple(
            await asyncio.gather(collect(llm, 64, 4, "long"), collect(llm, 8, 4, "fine"), return_exceptions=True)
        )

    long, fine = asyncio.run(main())
    assert isinstance(long, ValueError)
    assert "maximum model length" in str(long)
    assert isinstance(fine, list)
    assert fine[-1].finished


def test_a_reader_that_goes_away_aborts_its_request() -> None:
    llm = engine(time_scale=1.0, step_fixed_seconds=0.002)

    async def main() -> None:
        stream = llm.generate(prompt(8), params(10_000), "gone")
        async for _ in stream:
            break
        await stream.aclose()
        # The engine no longer runs it: a new request is alone in its steps.
        steps_before = llm.steps
        await collect(llm, 8, 3, "next")
        assert llm.steps - steps_before == 3

    asyncio.run(main())
    llm.shutdown()


def test_tokens_reach_the_reader_when_the_modelled_step_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core task waits for wall time to reach each step's modelled end before handing its tokens over."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(delay: float, *args: Any) -> Any:
        waits.append(delay)
        return await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    llm = engine(time_scale=1.0, step_fixed_seconds=10.0, batched_token_seconds=0.0, context_token_seconds=0.0)
    outputs = asyncio.run(collect(llm, 8, 3, "slow"))
    assert len(outputs) == 3
    # Three steps of 10 modelled seconds each: each wait reaches the end of its step (less the time already
    # passed, which on any machine is far less than a step).
    assert len(waits) == 3
    assert all(wait > 9.0 for wait in waits)
