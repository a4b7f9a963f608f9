"""What the GPUs cost (``--cost``), to price each benchmark's throughput."""

from __future__ import annotations

from pydantic import Field

from batchmark.runner.config.base import MAX_GPU_COST_PER_HOUR, MAX_GPUS, ConfigModel


class CostConfig(ConfigModel):
    """What the GPUs cost, to price each benchmark's throughput."""

    gpu_cost_per_hour: float = Field(
        gt=0, le=MAX_GPU_COST_PER_HOUR, description="Price of one GPU for one hour, in any currency."
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="GPUs the engine occupies (default: vllm_config tensor_parallel_size x pipeline_parallel_size).",
    )
