"""Repeated measurements: each benchmark's figures over its repeats as mean, 95% confidence interval and spread.

The interval is Student's t interval of the mean (SciPy's t distribution), which assumes the repeats are
independent draws of a roughly normal figure; with drift between rounds (a machine warming up) they are not
quite, which is why the runner interleaves the points' repeats instead of running them back to back.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import stats

from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.results.report import BenchmarkResult, Estimate, RepeatedBenchmark

CONFIDENCE = 0.95


def estimate(values: Sequence[float]) -> Estimate:
    """Mean, its 95% t interval and the sample standard deviation; one value has no interval."""
    count = len(values)
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    if count < 2:
        return Estimate(count=count, mean=mean, low=None, high=None, std=None, relative_spread=None)
    std = float(array.std(ddof=1))
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, count - 1)) * std / math.sqrt(count)
    return Estimate(
        count=count,
        mean=mean,
        low=mean - half,
        high=mean + half,
        std=std,
        relative_spread=std / abs(mean) if mean != 0 else None,
    )


def _figure(results: Sequence[BenchmarkResult], read: Callable[[BenchmarkResult], float | None]) -> Estimate | None:
    values = [read(result) for result in results]
    if any(value is None or math.isnan(value) for value in values):
        return None
    return estimate([value for value in values if value is not None])


def _statistic(result: BenchmarkResult, distribution: str, statistic: str) -> float | None:
    value: float | None = getattr(getattr(result.distributions, distribution), statistic)
    return value


def group_repeats(results: Sequence[BenchmarkResult]) -> list[list[int]]:
    """Indices of the results grouped by (point, strategy), in order of each group's first repeat."""
    groups: dict[tuple[int, str], list[int]] = {}
    for index, result in enumerate(results):
        if result.requests.completed > 0 and not result.interrupted:
            groups.setdefault((result.point, result.strategy), []).append(index)
    return list(groups.values())


def repeated_benchmarks(results: Sequence[BenchmarkResult], slo: dict[str, float]) -> list[RepeatedBenchmark]:
    """One entry per (point, strategy): its headline figures over the repeats that ran to the end."""
    summaries = []
    for indices in group_repeats(results):
        runs = [results[index] for index in indices]
        first = runs[0]
        latency: dict[str, Estimate] = {}
        for name in slo or {"request_latency_p50": 0.0, "request_latency_p99": 0.0}:
            distribution, statistic = parse_slo_name(name)
            figure = _figure(runs, functools.partial(_statistic, distribution=distribution, statistic=statistic))
            if figure is not None:
                latency[name] = figure
        met = [result.slo.met for result in runs if result.slo is not None]
        verdict: Literal["met", "missed", "some"] | None = None
        if met:
            verdict = "met" if all(met) else "missed" if not any(met) else "some"
        summaries.append(
            RepeatedBenchmark(
                point=first.point,
                strategy=first.strategy,
                swept=dict(first.swept),
                batch_size=first.batch_size,
                benchmarks=indices,
                requests_per_second=estimate([result.throughput.requests_per_second for result in runs]),
                output_tokens_per_second=estimate([result.throughput.output_tokens_per_second for result in runs]),
                total_tokens_per_second=estimate([result.throughput.total_tokens_per_second for result in runs]),
                goodput_output_tokens_per_second=_figure(
                    runs, lambda result: result.slo.goodput.output_tokens_per_second if result.slo else None
                ),
                cost_per_million_output_tokens=_figure(
                    runs, lambda result: result.cost.per_million_output_tokens if result.cost else None
                ),
                gpus=first.cost.gpus if first.cost is not None else None,
                latency=latency,
                slo_met_repeats=sum(met) if met else None,
                slo=verdict,
            )
        )
    return summaries
