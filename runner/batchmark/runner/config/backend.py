"""The backend section (``--backend``): GuideLLM's vllm_python_batch options, the engine, vLLM's engine
arguments and the simulated engine's cost model."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from batchmark.runner.config.base import MAX_REPLICAS, MAX_SECONDS, MAX_SEED, ConfigModel

log = logging.getLogger(__name__)


class SimulationConfig(ConfigModel):
    """Cost model of the simulated engine; the defaults model a ~0.6B model on one H100-class GPU."""

    time_scale: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description="Multiplier on simulated step times when sleeping; 0 computes timings without sleeping.",
    )
    step_fixed_seconds: float = Field(
        default=0.004,
        ge=0,
        le=3600,
        description="Fixed cost of one engine step (scheduling, kernel launches, sampling), seconds.",
    )
    batched_token_seconds: float = Field(
        default=3.0e-6,
        ge=0,
        le=3600,
        description="Cost per token processed in a step (prefill chunk or decode token), seconds.",
    )
    context_token_seconds: float = Field(
        default=3.7e-8,
        ge=0,
        le=3600,
        description="Cost per token of KV cache read by attention in a step, seconds.",
    )
    step_time_noise: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Relative standard deviation of each engine step's time: every step is multiplied by a"
        " log-normal factor of mean 1 and this spread, drawn from noise_seed (0: no noise). Models a shared"
        " machine, so that repeated measurements differ by a known amount.",
    )
    noise_seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seed of the step-time noise; each engine load draws one stream."
    )
    gpu_name: str = Field(
        default="simulated H100-class GPU",
        description="Name reported for the simulated device.",
    )
    load_seconds: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="Seconds the engine takes to load, as a real one reads its weights (0: at once); scaled by"
        " nothing, so that the loading phase can be observed and interrupted.",
    )


ASYNC_KIND = "vllm_python_async"
# GuideLLM's other name for its async backend.
ASYNC_ALIAS = "vllm_python"
# How the batch backend feeds its engine; the async backend submits each request as it is issued instead.
BATCH_ONLY_FIELDS = ("batch_size", "batch_timeout", "dispatch")
# The async backend's way of feeding the engine, beside backend.dispatch's batch and continuous (the worker's modes).
STREAM_DISPATCH = "stream"


class VllmPythonBatchBackendConfig(ConfigModel):
    """GuideLLM's in-process vLLM backends: ``vllm_python_batch`` (vLLM's ``LLM``, fed in micro-batches) and
    ``vllm_python_async`` (vLLM's ``AsyncLLM``, each request streamed)."""

    kind: Literal["vllm_python_batch", "vllm_python_async", "vllm_python"] = Field(
        default="vllm_python_batch",
        description="'vllm_python_batch': vLLM's LLM in the runner's engine process, fed in micro-batches"
        " (throughput benchmarking). 'vllm_python_async' (or 'vllm_python', GuideLLM's other name for it): vLLM's"
        " AsyncLLM there instead, each request submitted when the load generator issues it and scheduled by vLLM"
        " itself, its tokens streamed, so that time to first token and every interval between tokens are"
        " measured on the stream (latency profiling); batch_size, batch_timeout and dispatch do not apply.",
    )
    model: str = Field(
        min_length=1,
        description="Hugging Face model id or local path; wins over vllm_config.model.",
    )
    batch_size: int = Field(
        default=32, ge=1, description="Requests per micro-batch; a batch that fills is dispatched at once."
    )
    batch_timeout: float = Field(
        default=0.01,
        gt=0,
        le=MAX_SECONDS,
        description="Seconds after a batch's first request arrived before a partial batch is dispatched.",
    )
    request_format: str = Field(
        default="default-template",
        description=(
            "How prompts are built: 'plain' (token ids, no template), 'default-template' (the tokenizer's"
            " chat template) or a Jinja2 chat template given inline or as a file path."
        ),
    )
    vllm_config: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM EngineArgs by their Python names (e.g. gpu_memory_utilization, max_model_len)."
        " disable_log_stats is true unless given or an SLO targets ttft or tpot, as vllm.LLM runs: false turns"
        " on vLLM's per-request stats, which give TTFT and time per output token at a cost in CPU.",
    )
    dispatch: Literal["batch", "continuous"] = Field(
        default="batch",
        description=(
            "'batch' (the seed's behaviour): micro-batches of batch_size through LLM.generate(), one at a time."
            " 'continuous': one engine thread adds requests to vLLM's scheduler while it runs, so the engine"
            " never waits for a batch to fill or drain; batch_size then caps the requests in flight and"
            " batch_timeout is unused."
        ),
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS,
        strict=True,
        description="Engine replicas in this run (data parallelism, as a fleet of independent engines serves): each"
        " its own engine process on its own devices (the visible GPUs split evenly, tensor_parallel_size x"
        " pipeline_parallel_size each; on a CPU, the CPUs this run may use), fed by its own micro-batcher from the"
        " one load generator, which sends each request to the replica with the fewest in flight. Results give"
        " each replica's figures and their sum over one measured window.",
    )
    engine: Literal["vllm", "simulated"] = Field(
        default="vllm",
        description="'vllm' runs the real engine; 'simulated' models its speed without a GPU.",
    )
    simulation: SimulationConfig = Field(
        default_factory=SimulationConfig, description="Cost model used when engine is 'simulated'."
    )

    @field_validator("vllm_config")
    @classmethod
    def _engine_args_can_work(cls, vllm_config: dict[str, Any]) -> dict[str, Any]:
        """Sizes that no engine accepts fail here, in milliseconds, not inside the engine after minutes."""
        for name, value in vllm_config.items():
            bound = ENGINE_ARG_BOUNDS.get(name)
            if bound is None:
                continue
            try:
                bound.validate_python(value)
            except ValidationError as error:
                problem = error.errors()[0]["msg"]
                raise PydanticCustomError(
                    "engine_argument",
                    "{name}: {problem} (got {value})",
                    {"name": name, "problem": problem, "value": repr(value)},
                ) from None
        return vllm_config

    @field_validator("kind")
    @classmethod
    def _one_name_for_async(cls, kind: str) -> str:
        return ASYNC_KIND if kind == ASYNC_ALIAS else kind

    @model_validator(mode="after")
    def _batch_fields_only_for_batch(self) -> VllmPythonBatchBackendConfig:
        if not self.streams:
            return self
        for name in BATCH_ONLY_FIELDS:
            if getattr(self, name) != type(self).model_fields[name].default:
                raise PydanticCustomError(
                    "batch_only",
                    "{name}: only the vllm_python_batch backend has it; vllm_python_async submits each request as it"
                    " is issued and vLLM schedules them",
                    {"name": name},
                )
        return self

    @property
    def streams(self) -> bool:
        """The async backend: each request submitted as it is issued, its tokens streamed."""
        return self.kind == ASYNC_KIND

    @property
    def dispatch_mode(self) -> str:
        """How the engine worker feeds the engine: the batch backend's dispatch, or ``stream``."""
        return STREAM_DISPATCH if self.streams else self.dispatch

    @model_validator(mode="after")
    def _top_level_model_wins(self) -> VllmPythonBatchBackendConfig:
        configured = self.vllm_config.get("model")
        if configured is not None and configured != self.model:
            log.warning(
                "backend.vllm_config.model=%r is ignored: backend.model=%r takes precedence",
                configured,
                self.model,
            )
        return self

    def engine_args(self) -> dict[str, Any]:
        """The keyword arguments for ``vllm.LLM`` (or the simulated engine): vllm_config with our model."""
        return {**self.vllm_config, "model": self.model}

    def with_engine_timings(self) -> VllmPythonBatchBackendConfig:
        """This backend with vLLM's per-request stats turned on, unless vllm_config already decides."""
        if "disable_log_stats" in self.vllm_config:
            return self
        return self.model_copy(update={"vllm_config": {**self.vllm_config, "disable_log_stats": False}})


BackendConfig = VllmPythonBatchBackendConfig


_Positive = Annotated[int, Field(ge=1, strict=True)]


_NotNegative = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]


# vLLM's engine arguments whose values are obviously wrong outside these bounds, whatever the model or GPU;
# the simulated engine reads the first three. Other names and values are vLLM's to judge.
ENGINE_ARG_BOUNDS: dict[str, TypeAdapter[Any]] = {
    "max_num_seqs": TypeAdapter(_Positive),
    "max_num_batched_tokens": TypeAdapter(_Positive),
    # -1: as long as fits in memory; vLLM also reads strings such as "32k".
    "max_model_len": TypeAdapter(Annotated[int, Field(ge=1, strict=True)] | Literal[-1] | str),
    "tensor_parallel_size": TypeAdapter(_Positive),
    "pipeline_parallel_size": TypeAdapter(_Positive),
    "data_parallel_size": TypeAdapter(_Positive),
    "block_size": TypeAdapter(_Positive),
    "kv_cache_memory_bytes": TypeAdapter(_Positive),
    "gpu_memory_utilization": TypeAdapter(Annotated[float, Field(gt=0, le=1, strict=True, allow_inf_nan=False)]),
    "swap_space": TypeAdapter(_NotNegative),
    "cpu_offload_gb": TypeAdapter(_NotNegative),
}
