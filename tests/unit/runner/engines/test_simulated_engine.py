import numpy as np
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


def _one_step_per_call_seconds(engine: SimulatedLLM, calls: int) -> list[float]:
    """Engine seconds of ``calls`` one-step generate() calls (a one-token prompt asking for one token)."""
    seconds = []
    for _ in range(calls):
        before = engine.simulated_seconds
        engine.generate([prompt(1)], SamplingParams(max_tokens=1))
        seconds.append(engine.simulated_seconds - before)
    return seconds


def test_step_time_noise_has_mean_one_and_the_stated_spread() -> None:
    step = 0.001 + 1e-5
    quiet = _one_step_per_call_seconds(llm(), 10)
    assert quiet == pytest.approx([step] * 10)
    noisy = np.array(_one_step_per_call_seconds(llm(step_time_noise=0.2, noise_seed=7), 20_000)) / step
    assert noisy.mean() == pytest.approx(1.0, abs=0.01)
    assert noisy.std() == pytest.approx(0.2, rel=0.05)
    assert (noisy > 0).all()


def test_step_time_noise_is_seeded() -> None:
    first = _one_step_per_call_seconds(llm(step_time_noise=0.1, noise_seed=3), 50)
    again = _one_step_per_call_seconds(llm(step_time_noise=0.1, noise_seed=3), 50)
    other = _one_step_per_call_seconds(llm(step_time_noise=0.1, noise_seed=4), 50)
    assert first == again
    assert first != other


def test_step_time_noise_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="step_time_noise"):
        llm(step_time_noise=1.5)


def test_with_vllms_per_request_stats_off_no_output_carries_them_as_in_vllm() -> None:
    prompts, params = [prompt(10)], SamplingParams(max_tokens=3)
    assert llm().generate(prompts, params)[0].metrics is not None
    assert llm(log_stats=False).generate(prompts, params)[0].metrics is None
    engine = llm(log_stats=False).llm_engine
    engine.add_request("r", prompt(10), params)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert [output.metrics for output in outputs] == [None]


def test_the_loaded_engine_follows_vllm_config_disable_log_stats() -> None:
    from batchmark.runner.config.backend import BackendConfig
    from batchmark.runner.engines.simulated_engine import load_simulated_engine

    for setting, stats in ((None, True), (False, True), (True, False)):
        vllm_config = {} if setting is None else {"disable_log_stats": setting}
        config = BackendConfig(model="m", engine="simulated", vllm_config=vllm_config, simulation={"time_scale": 0})
        assert load_simulated_engine(config, seed=0).info.details["engine_stats"] is stats
