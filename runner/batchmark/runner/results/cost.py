"""Throughput priced: what a million tokens cost on the GPUs the engine occupied."""

from __future__ import annotations

from typing import Any

from batchmark.runner.config.cost import CostConfig
from batchmark.runner.results.report import CostFigures, Throughput

SECONDS_PER_HOUR = 3600.0
MILLION = 1_000_000.0


def gpu_count(cost: CostConfig, vllm_config: dict[str, Any], replicas: int = 1) -> int:
    """The configured count, else tensor_parallel_size x pipeline_parallel_size (1 each by default) per replica."""
    if cost.gpus is not None:
        return cost.gpus
    per_replica = int(vllm_config.get("tensor_parallel_size", 1) or 1) * int(
        vllm_config.get("pipeline_parallel_size", 1) or 1
    )
    return per_replica * replicas


def price(cost: CostConfig, vllm_config: dict[str, Any], throughput: Throughput, replicas: int = 1) -> CostFigures:
    gpus = gpu_count(cost, vllm_config, replicas)
    per_second = cost.gpu_cost_per_hour * gpus / SECONDS_PER_HOUR

    def per_million(tokens_per_second: float) -> float | None:
        return per_second / tokens_per_second * MILLION if tokens_per_second > 0 else None

    return CostFigures(
        gpus=gpus,
        gpu_cost_per_hour=cost.gpu_cost_per_hour,
        per_million_output_tokens=per_million(throughput.output_tokens_per_second),
        per_million_total_tokens=per_million(throughput.total_tokens_per_second),
    )
