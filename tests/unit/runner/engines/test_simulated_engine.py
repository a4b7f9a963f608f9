import pytest

from batchmark.runner.engines.simulated import SamplingParams, SimulatedLLM, TokensPrompt


def prompt(length: int, marker: int = 0) -> TokensPrompt:
    return TokensPrompt(prompt_token_ids=[marker] + [1] * (length - 1))


def llm(**overrides: float) -> SimulatedLLM:
    settings: dict[str, float] = {
        "time_scale": 0.0,
        "step_fixed_seconds": 0.001,
        "batched_token_seconds": 1e-5,
        "context_token_seconds": 0.0,
    }
    settings.update(overrides)
    return SimulatedLLM(model="m", **settings)  # type: ignore[arg-type]


def test_outputs_have_exact_lengths_in_input_order() -> None:
    engine = llm()
    prompts = [prompt(10, 1), prompt(20, 2), prompt(5, 3)]
    params = [SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True) for n in (3, 7, 1)]
    outputs = engine.generate(prompts, params, use_tqdm=False)
    assert [len(out.prompt_token_ids or []) for out in outputs] == [10, 20, 5]
    assert [len(out.outputs[0].token_ids) for out in outputs] == [3, 7, 1]
    assert all(out.finished and out.outputs[0].finish_reason == "length" for out in outputs)


def test_one_request_costs_one_prefill_step_then_one_step_per_token() -> None:
    engine = llm(time_scale=1.0)
    [output] = engine.generate([prompt(100)], SamplingParams(max_tokens=5))
    stats = output.metrics
    assert stats is not None
    prefill = 0.001 + 100 * 1e-5  # the prefill step also samples the first token
    decode = 4 * (0.001 + 1e-5)
    assert stats.first_token_ts - stats.scheduled_ts == pytest.approx(prefill, abs=2e-3)
    assert stats.last_token_ts - stats.first_token_ts == pytest.approx(decode, abs=2e-3)
    assert stats.queued_ts <= stats.scheduled_ts <= stats.first_token_ts <= stats.last_token_ts


def test_max_num_seqs_queues_the_rest() -> None:
    engine = llm(time_scale=1.0)
    engine.max_num_seqs = 2
    outputs = engine.generate([prompt(4, i) for i in range(4)], SamplingParams(max_tokens=3))
    first_token = sorted(out.metrics.first_token_ts for out in outputs if out.metrics)
    # The third and fourth requests start only after the first two finished.
    assert first_token[2] > first_token[1] + 2 * 0.001


def test_chunked_prefill_respects_the_token_budget() -> None:
    fast = llm(time_scale=1.0)
    chunked = llm(time_scale=1.0)
    chunked.max_num_batched_tokens = 100
    [whole] = fast.generate([prompt(1000)], SamplingParams(max_tokens=1))
    [split] = chunked.generate([prompt(1000)], SamplingParams(max_tokens=1))
    assert whole.metrics is not None
    assert split.metrics is not None
    # Ten chunks pay the fixed step cost ten times.
    whole_time = whole.metrics.first_token_ts - whole.metrics.scheduled_ts
    split_time = split.metrics.first_token_ts - split.metrics.scheduled_ts
    assert split_time - whole_time == pytest.approx(9 * 0.001, abs=3e-3)


def test_a_prompt_longer_than_the_context_fails_the_call_as_in_vllm() -> None:
    engine = llm()
    engine.max_model_len = 16
    with pytest.raises(ValueError, match="longer than the maximum model length of 16"):
        engine.generate([prompt(8), prompt(17)], SamplingParams(max_tokens=1))


def test_time_scale_zero_does_not_sleep() -> None:
    import time

    engine = llm(step_fixed_seconds=10.0)
    started = time.monotonic()
    engine.generate([prompt(8)], SamplingParams(max_tokens=100))
    assert time.monotonic() - started < 1.0
