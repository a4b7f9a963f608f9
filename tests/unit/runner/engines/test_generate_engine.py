from collections.abc import Hashable
from typing import Any

import pytest

from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import EngineDead, EngineInfo, GenerateEngine, WorkItem
from batchmark.runner.engines.simulated import RequestOutput, SamplingParams, SimulatedLLM, TokensPrompt
from batchmark.runner.engines.simulated_engine import load_simulated_engine
from batchmark.runner.engines.vllm_engine import StepCounter, engine_args


def items(*prompt_lengths: int) -> list[WorkItem]:
    return [WorkItem(RequestSpec(i, length, 4, -1, 0), 0.0, 0.0) for i, length in enumerate(prompt_lengths)]


def test_a_bad_request_fails_alone_and_the_batch_completes() -> None:
    simulated = load_simulated_engine(
        VllmPythonBatchBackendConfig(
            model="m", engine="simulated", vllm_config={"max_model_len": 64}, simulation={"time_scale": 0}
        ),
        seed=1,
    )
    completions = simulated.run_batch(items(8, 100, 16, 32, 65))
    by_id = {completion.request_id: completion for completion in completions}
    assert sorted(by_id) == [0, 1, 2, 3, 4]
    assert by_id[1].error is not None
    assert "longer than the maximum model length" in by_id[1].error
    assert by_id[4].error is not None
    for good in (0, 2, 3):
        assert by_id[good].error is None
        assert by_id[good].output_tokens == 4
    assert by_id[2].prompt_tokens == 16


def test_engine_timings_are_reported() -> None:
    simulated = load_simulated_engine(
        VllmPythonBatchBackendConfig(model="m", engine="simulated", simulation={"time_scale": 0}), seed=1
    )
    [completion] = simulated.run_batch(items(8))
    assert completion.timings.to_first_token >= 0
    assert completion.timings.decode >= 0


def test_prompts_are_built_once_ahead_and_conversion_waits_for_its_caller() -> None:
    simulated = load_simulated_engine(
        VllmPythonBatchBackendConfig(
            model="m", engine="simulated", vllm_config={"max_model_len": 64}, simulation={"time_scale": 0}
        ),
        seed=1,
    )
    assert isinstance(simulated, GenerateEngine)
    ready = [simulated.prepare(item) for item in items(8, 16, 100)]
    assert ready[0].prepared is not None
    assert ready[0].failure is None
    assert simulated.prepare(ready[0]) is ready[0]  # built once
    steps_before, calls_before = simulated.clock.steps(), simulated.clock.calls
    convert = simulated.generate_batch(ready)
    # generate() ran five times (the too-long prompt fails every call it is in: all three, then [16, 100],
    # then itself; [8] and [16] succeed) and each call was clocked; nothing was converted yet.
    assert simulated.clock.calls - calls_before == 5
    assert simulated.clock.seconds > 0
    assert simulated.clock.steps() > steps_before
    completions = {completion.request_id: completion for completion in convert()}
    assert completions[0].output_tokens == completions[1].output_tokens == 4
    assert completions[2].error is not None
    assert "maximum model length" in completions[2].error


class OddPromptsFail:
    """Builds token prompts for even request ids; odd ones cannot be built."""

    def build(self, spec: RequestSpec) -> tuple[Any, Hashable]:
        if spec.request_id % 2:
            raise ValueError("no template for this one")
        ids = [1 + spec.request_id] * spec.prompt_tokens
        return TokensPrompt(prompt_token_ids=ids), tuple(ids)

    def output_key(self, output: Any) -> Hashable:
        return tuple(output.prompt_token_ids)


def test_a_prompt_that_cannot_be_built_fails_alone_when_it_arrives() -> None:
    engine = GenerateEngine(
        SimulatedLLM(model="m", time_scale=0),
        OddPromptsFail(),
        lambda spec: SamplingParams(max_tokens=spec.output_tokens, min_tokens=spec.output_tokens, ignore_eos=True),
        EngineInfo(kind="simulated", model="m"),
    )
    good, bad = [engine.prepare(item) for item in items(8, 8)]
    assert good.prepared is not None
    assert bad.prepared is None
    assert bad.failure == "prompt: no template for this one"
    completions = {completion.request_id: completion for completion in engine.run_batch([good, bad])}
    assert completions[0].error is None
    assert completions[1].error == bad.failure


def test_engine_steps_follow_the_batches() -> None:
    """Eight requests of 32 prompt tokens and 4 output tokens in one call: one step prefills all eight and
    samples their first tokens, three more decode; steps do not depend on how fast the machine is."""
    simulated = load_simulated_engine(
        VllmPythonBatchBackendConfig(model="m", engine="simulated", simulation={"time_scale": 0}), seed=1
    )
    simulated.run_batch(items(*[32] * 8))
    assert simulated.clock.steps() == 4
    for size in (1, 1):
        simulated.run_batch(items(*[32] * size))
    assert simulated.clock.steps() == 12


class Reversed(SimulatedLLM):
    """Returns generate()'s outputs in reverse order."""

    def generate(self, *args: Any, **kwargs: Any) -> list[RequestOutput]:
        return list(reversed(super().generate(*args, **kwargs)))


def test_outputs_out_of_order_are_matched_by_prompt() -> None:
    simulated = GenerateEngine(
        Reversed(model="m", time_scale=0),
        OddPromptsFail(),
        lambda spec: SamplingParams(max_tokens=spec.output_tokens, min_tokens=spec.output_tokens, ignore_eos=True),
        EngineInfo(kind="simulated", model="m"),
    )
    completions = simulated.run_batch(items(8, 16, 24, 32, 40))
    assert {c.request_id: c.prompt_tokens for c in completions if c.error is None} == {0: 8, 2: 24, 4: 40}


def test_step_counter_counts_the_steps_generate_runs_inside() -> None:
    class Engine:
        def __init__(self) -> None:
            self.left = 3

        def step(self) -> list[int]:
            self.left -= 1
            return [self.left]

    engine = Engine()
    counter = StepCounter(engine)
    while engine.left:
        engine.step()
    assert counter() == 3


class DeadLLM:
    """An engine whose every call raises, as vLLM's client does once its engine core has died."""

    def __init__(self) -> None:
        self.calls = 0
        self.llm_engine = self

    def generate(self, prompts: Any, params: Any, use_tqdm: bool = False) -> list[Any]:
        self.calls += 1
        raise RuntimeError("EngineCore encountered an issue")

    def step(self) -> list[Any]:
        raise RuntimeError("EngineCore encountered an issue")

    def add_request(self, request_id: str, prompt: Any, params: Any) -> None:
        raise RuntimeError("EngineCore encountered an issue")


def dead_engine(llm: DeadLLM, died: EngineDead | None) -> GenerateEngine:
    return GenerateEngine(
        llm,
        OddPromptsFail(),
        lambda spec: SamplingParams(max_tokens=4),
        EngineInfo(kind="test", model="m"),
        death=lambda: died,
    )


def test_a_dead_engine_ends_the_batch_at_its_first_error_without_splitting_it() -> None:
    llm = DeadLLM()
    died = EngineDead("vLLM's engine core process 7 died (killed by SIGKILL)")
    engine = dead_engine(llm, died)
    with pytest.raises(EngineDead) as raised:
        engine.run_batch([WorkItem(RequestSpec(i, 8, 4, -1, 0), 0.0, 0.0) for i in (0, 2, 4, 6)])
    assert raised.value is died
    assert llm.calls == 1
    with pytest.raises(EngineDead):
        engine.step()
    with pytest.raises(EngineDead):
        engine.add(WorkItem(RequestSpec(0, 8, 4, -1, 0), 0.0, 0.0))


def test_an_engine_error_without_a_death_fails_the_requests_as_before() -> None:
    llm = DeadLLM()
    engine = dead_engine(llm, None)
    completions = engine.run_batch([WorkItem(RequestSpec(i, 8, 4, -1, 0), 0.0, 0.0) for i in (0, 2)])
    assert [completion.error for completion in completions] == ["RuntimeError: EngineCore encountered an issue"] * 2
    assert llm.calls == 3  # the batch, then each half
    failed = engine.add(WorkItem(RequestSpec(0, 8, 4, -1, 0), 0.0, 0.0))
    assert failed is not None
    assert failed.error == "RuntimeError: EngineCore encountered an issue"


def test_vllm_runs_with_its_per_request_stats_off_unless_vllm_config_turns_them_on() -> None:
    def stats_off(vllm_config: dict[str, Any]) -> Any:
        return engine_args(VllmPythonBatchBackendConfig(model="m", vllm_config=vllm_config))["disable_log_stats"]

    assert stats_off({}) is True  # as vllm.LLM runs by default
    assert stats_off({"disable_log_stats": False}) is False
    assert stats_off({"disable_log_stats": True}) is True
