"""Repeated measurements: each benchmark's figures over its repeats as mean, 95% confidence interval and spread,
and the one rule that says whether two repeated figures differ.

Every repeated figure (throughput, goodput, cost, latency) is a positive quantity, often skewed, so its interval
is Student's t interval of the mean of the log values, back-transformed: the geometric mean times or divided by
a factor, which never goes below zero however few the repeats (an interval on the raw values at 2 repeats spans
the mean ± 12.7 / sqrt(2) standard deviations and does). Where a repeat is zero (goodput when no request met its
targets) the log does not exist, and the interval is the t interval of the raw values with its low end clipped
at zero. Either assumes the repeats are independent draws; with drift between rounds (a machine warming up) they
are not quite, which is why the runner interleaves the points' repeats instead of running them back to back.

Whether two figures differ is Welch's t-test (two-sided, no assumption of equal variances) at SIGNIFICANCE, on
the raw values: ``batchmark compare`` and the recommendation both ask ``differ``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.results.report import BenchmarkResult, Estimate, RepeatedBenchmark

CONFIDENCE = 0.95
SIGNIFICANCE = 0.05
TEST = "Welch's t-test"
LOG_INTERVAL = "t interval on log values (geometric mean, back-transformed)"
CLIPPED_INTERVAL = "t interval on raw values, clipped at zero (a repeat was zero, so no log)"
# Below this many repeats a 95% interval is very wide (t = 12.7 at 2) and the test rarely tells points apart.
ENOUGH_REPEATS = 3


def _t_quantile(count: int) -> float:
    from scipy import stats  # noqa: PLC0415 - scipy.stats takes seconds to import; only repeats need it

    return float(stats.t.ppf((1 + CONFIDENCE) / 2, count - 1))


def estimate(values: Sequence[float]) -> Estimate:
    """Mean, its 95% interval (on the log scale, see the module) and the sample standard deviation; one value has
    no interval."""
    count = len(values)
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    if count < 2:
        return Estimate(
            count=count, mean=mean, low=None, high=None, std=None, relative_spread=None, values=list(map(float, array))
        )
    std = float(array.std(ddof=1))
    geometric_mean = None
    if bool((array > 0).all()):
        logs = np.log(array)
        centre = float(logs.mean())
        half = _t_quantile(count) * float(logs.std(ddof=1)) / math.sqrt(count)
        geometric_mean = math.exp(centre)
        low, high, method = math.exp(centre - half), math.exp(centre + half), LOG_INTERVAL
    else:
        half = _t_quantile(count) * std / math.sqrt(count)
        low, high, method = max(mean - half, 0.0), mean + half, CLIPPED_INTERVAL
    return Estimate(
        count=count,
        mean=mean,
        low=low,
        high=high,
        std=std,
        relative_spread=std / abs(mean) if mean != 0 else None,
        interval_method=method,
        geometric_mean=geometric_mean,
        values=list(map(float, array)),
    )


def welch_p_value(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided p-value that the two means differ; None with fewer than two values on a side."""
    if len(first) < 2 or len(second) < 2:
        return None
    if np.std(first) == 0 and np.std(second) == 0:
        # No spread at all (a noiseless simulation): the means either differ or they do not.
        return 0.0 if float(np.mean(first)) != float(np.mean(second)) else 1.0
    from scipy import stats  # noqa: PLC0415 - scipy.stats takes seconds to import; only repeats need it

    result = stats.ttest_ind(first, second, equal_var=False)
    p_value = float(result.pvalue)
    return None if math.isnan(p_value) else p_value


def differ(first: Sequence[float], second: Sequence[float]) -> tuple[bool | None, float | None]:
    """Whether two figures' repeats differ (Welch's p-value below SIGNIFICANCE), and the p-value; (None, None)
    with fewer than two repeats on a side."""
    p_value = welch_p_value(first, second)
    return (None if p_value is None else p_value < SIGNIFICANCE), p_value


def few_repeats_warning(repeated: Sequence[RepeatedBenchmark]) -> str | None:
    """The warning for a run whose fewest repeats of a benchmark are 2: its intervals and test are nearly
    powerless."""
    counts = [entry.output_tokens_per_second.count for entry in repeated]
    fewest = min(counts, default=0)
    if not 2 <= fewest < ENOUGH_REPEATS:
        return None
    return (
        f"warning: only {fewest} repeats of some benchmarks: their 95% intervals span about ±{_t_quantile(fewest):.1f}"
        f" standard errors and {TEST} rarely tells points apart; run --repeats {ENOUGH_REPEATS} or more (5 or more"
        " to tell a 10% difference)"
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
