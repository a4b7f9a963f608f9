"""The simulated engine's entry: simulated.py's model of vLLM's speed, loaded from backend.simulation, needing no GPU.

Its tokens are the text's UTF-8 bytes (its prompt builder makes the same ids), so prompts counted before a run
count exactly as the engine sees them. Of vllm_config it reads only the scheduler's limits, the context and
whether vLLM's per-request stats are off (then, as vLLM, it reports no TTFT or TPOT).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from typing import Any

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.records import prompt_text
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import Engine, EngineInfo, GenerateEngine
from batchmark.runner.engines.bytetokens import byte_tokens
from batchmark.runner.engines.engine_args import EngineArgumentError, did_you_mean
from batchmark.runner.engines.entry import EngineEntry, PodNeeds
from batchmark.runner.engines.prompts import TokenPromptFactory
from batchmark.runner.engines.simulated import (
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_VOCAB_SIZE,
    RequestOutputKind,
    SamplingParams,
    SimulatedLLM,
    TokensPrompt,
)
from batchmark.runner.engines.simulated_async import SimulatedAsyncLLM
from batchmark.runner.engines.streaming import AsyncGenerateEngine, StreamingEngine
from batchmark.runner.engines.tokens import Tokens

# What the simulated engine reads from vllm_config; it ignores the other vLLM names.
SIMULATED_ENGINE_ARGS = frozenset({"max_num_seqs", "max_num_batched_tokens", "max_model_len", "disable_log_stats"})

SIMULATED_BANNER = (
    "SIMULATED ENGINE: no model ran. Timings come from batchmark's model of vLLM on {gpu}; "
    "use them to test the harness, never as measurements."
)


def _always_available(config: BackendConfig) -> None:
    """Plain Python: it runs wherever the runner does."""


def check_simulated_argument(name: str, value: Any, vllm_names_checked: bool) -> None:
    """Values the simulated engine cannot use; without vLLM, a near miss of one of its own names (a typo)."""
    if not vllm_names_checked and name not in SIMULATED_ENGINE_ARGS:
        # Only the simulated engine's own names are known here: any other name may be meant for vLLM and is
        # left alone.
        hint = did_you_mean(name, SIMULATED_ENGINE_ARGS)
        if hint:
            raise EngineArgumentError(f"vllm_config.{name}: not an argument the simulated engine reads{hint}")
    if name == "disable_log_stats" and not isinstance(value, bool):
        raise EngineArgumentError(f"vllm_config.disable_log_stats: true or false, got {value!r}")
    if name == "max_model_len" and not (isinstance(value, int) and value >= 1):
        raise EngineArgumentError(
            f"vllm_config.max_model_len: the simulated engine needs a number of tokens, got {value!r}"
        )


class _TokenPrompts:
    def __init__(self, factory: TokenPromptFactory) -> None:
        self._factory = factory

    def build(self, spec: RequestSpec) -> tuple[Any, Hashable]:
        token_ids = byte_tokens(prompt_text(spec.prompt)) if spec.prompt is not None else self._factory.token_ids(spec)
        return TokensPrompt(prompt_token_ids=token_ids), tuple(token_ids)

    def output_key(self, output: Any) -> Hashable:
        return tuple(output.prompt_token_ids)


def _pinned_length(spec: RequestSpec) -> SamplingParams:
    return SamplingParams(
        max_tokens=spec.output_tokens,
        min_tokens=spec.output_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
    )


def load_simulated_engine(config: BackendConfig, seed: int) -> Engine:
    llm, prompts, info = _load(config, seed)
    return GenerateEngine(llm, prompts, _pinned_length, info, steps=lambda: llm.steps)


def load_simulated_streaming_engine(config: BackendConfig, seed: int) -> StreamingEngine:
    llm, prompts, info = _load(config, seed)
    async_llm = SimulatedAsyncLLM(llm)
    return AsyncGenerateEngine(async_llm, prompts, _streamed_pinned_length, info, shutdown=async_llm.shutdown)


def _streamed_pinned_length(spec: RequestSpec) -> SamplingParams:
    params = _pinned_length(spec)
    params.output_kind = RequestOutputKind.DELTA
    return params


def _load(config: BackendConfig, seed: int) -> tuple[SimulatedLLM, _TokenPrompts, EngineInfo]:
    engine_args = config.engine_args()
    simulation = config.simulation
    time.sleep(simulation.load_seconds)
    llm = SimulatedLLM(
        model=config.model,
        max_num_seqs=_tokens(engine_args, "max_num_seqs", DEFAULT_MAX_NUM_SEQS),
        max_num_batched_tokens=_tokens(engine_args, "max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS),
        max_model_len=_tokens(engine_args, "max_model_len", DEFAULT_MAX_MODEL_LEN),
        time_scale=simulation.time_scale,
        step_fixed_seconds=simulation.step_fixed_seconds,
        batched_token_seconds=simulation.batched_token_seconds,
        context_token_seconds=simulation.context_token_seconds,
        step_time_noise=simulation.step_time_noise,
        noise_seed=simulation.noise_seed,
        engine_args=engine_args,
        log_stats=engine_args.get("disable_log_stats") is not True,
    )
    prompts = _TokenPrompts(TokenPromptFactory.for_vocabulary(DEFAULT_VOCAB_SIZE, set(), seed))
    info = EngineInfo(
        kind=SIMULATED.name,
        model=config.model,
        gpu_name=simulation.gpu_name,
        max_model_len=llm.max_model_len,
        details={
            "max_num_seqs": llm.max_num_seqs,
            "max_num_batched_tokens": llm.max_num_batched_tokens,
            "time_scale": simulation.time_scale,
            "step_time_noise": simulation.step_time_noise,
            "engine_stats": llm.log_stats,
        },
    )
    return llm, prompts, info


def _tokens(engine_args: dict[str, Any], name: str, default: int) -> int:
    value = engine_args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"vllm_config.{name}: the simulated engine needs a positive whole number, got {value!r}")
    return value


def _byte_tokens(backend: BackendConfig, asked_max_model_len: list[int]) -> Tokens:
    return Tokens(
        lambda text: len(text.encode("utf-8")), min(asked_max_model_len, default=DEFAULT_MAX_MODEL_LEN), "utf-8 bytes"
    )


def _no_gpus(engine_args: Mapping[str, Any], where: str) -> int:
    return 0


SIMULATED = EngineEntry(
    name="simulated",
    settings="simulation",
    simulated=True,
    loaded_label="SIMULATED engine (timings modelled, not measured)",
    banner=SIMULATED_BANNER,
    continuous_dispatch=True,
    versions=(),
    # One small Python process.
    pod=PodNeeds(requests={"cpu": "100m", "memory": "256Mi"}, gpus=_no_gpus),
    check_available=_always_available,
    check_argument=check_simulated_argument,
    load=load_simulated_engine,
    load_streaming=load_simulated_streaming_engine,
    count_tokens=_byte_tokens,
    configured_device=lambda backend: backend.simulation.gpu_name,
)
