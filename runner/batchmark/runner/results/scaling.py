"""Engine replicas' figures together: their spread, and the scaling of N replicas against one in the same run."""

from __future__ import annotations

from typing import Any

from batchmark.runner.results.report import BenchmarkResult, ReplicaResult, ReplicasSummary
from batchmark.runner.results.stats import Distribution


def replicas_summary(replicas: list[ReplicaResult], start_skew_seconds: float = 0.0) -> ReplicasSummary:
    """The replicas' spread: their output rates as a distribution, and the fastest over the slowest."""
    rates = [replica.throughput.output_tokens_per_second for replica in replicas]
    spread = Distribution()
    spread.extend(rates)
    slowest = min(rates)
    return ReplicasSummary(
        count=len(replicas),
        output_tokens_per_second=spread.summary(),
        straggler_ratio=max(rates) / slowest if slowest > 0 else None,
        start_skew_seconds=start_skew_seconds,
    )


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
