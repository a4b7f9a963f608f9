"""Scaling efficiency: a benchmark of N engine replicas against one replica measured in the same run."""

from __future__ import annotations

from typing import Any

from batchmark.runner.results.report import BenchmarkResult


def with_scaling_efficiency(results: list[BenchmarkResult], replicas: list[int]) -> list[BenchmarkResult]:
    """The results, those of several replicas given their scaling efficiency where the run measured one replica
    at the same strategy, repeat and other swept values (``replicas``: each result's replica count).

    Efficiency is output tokens/s over N times the one replica's: 1.0 when N replicas serve N times as much.
    """
    single: dict[tuple[Any, ...], float] = {}
    for result, count in zip(results, replicas, strict=True):
        if count == 1 and not result.interrupted:
            single[_key(result)] = result.throughput.output_tokens_per_second
    updated = []
    for result, count in zip(results, replicas, strict=True):
        baseline = single.get(_key(result))
        summary = result.replica_summary
        if summary is None or count == 1 or not baseline:
            updated.append(result)
            continue
        efficiency = result.throughput.output_tokens_per_second / (count * baseline)
        summary = summary.model_copy(update={"scaling_efficiency": efficiency})
        updated.append(result.model_copy(update={"replica_summary": summary}))
    return updated


def _key(result: BenchmarkResult) -> tuple[Any, ...]:
    others = tuple(sorted((name, repr(value)) for name, value in result.swept.items() if name != "replicas"))
    return (result.strategy, result.repeat, others)
