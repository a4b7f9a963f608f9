"""The latency budget (``--slo``): per-request targets for goodput, per-benchmark verdicts, and the
recommended setting of a run.

A target names a distribution and a statistic (``request_latency_p99=2.0``). The benchmark meets it when that
statistic is at most the target; a request meets it when its own value of the distribution is at most the
target, which is what goodput counts (as GuideLLM does). A request without a value (no TTFT from an engine that
gives no timings) does not meet a target on it: a budget is not met by missing data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.results.report import (
    BenchmarkResult,
    Goodput,
    Recommendation,
    SloTargetResult,
    SloVerdict,
)


class RequestBudget:
    """The per-request side of a budget: the tightest target on each distribution."""

    def __init__(self, slo: Mapping[str, float]) -> None:
        limits: dict[str, float] = {}
        for name, target in slo.items():
            distribution, _ = parse_slo_name(name)
            limits[distribution] = min(target, limits.get(distribution, math.inf))
        self.limits = limits

    def __bool__(self) -> bool:
        return bool(self.limits)

    def meets(self, values: Mapping[str, float | None]) -> bool:
        """``values``: the request's value of each distribution (None or NaN: it has none)."""
        for distribution, limit in self.limits.items():
            value = values.get(distribution)
            if value is None or math.isnan(value) or value > limit:
                return False
        return True


def verdict(
    slo: Mapping[str, float], result: BenchmarkResult, good_requests: int, good_output_tokens: int
) -> SloVerdict:
    targets = []
    for name, target in slo.items():
        distribution, statistic = parse_slo_name(name)
        summary = getattr(result.distributions, distribution)
        observed = getattr(summary, statistic) if summary.count else None
        targets.append(
            SloTargetResult(
                name=name, target=target, observed=observed, met=observed is not None and observed <= target
            )
        )
    measured = result.measured_duration
    return SloVerdict(
        met=all(target.met for target in targets),
        targets=targets,
        goodput=Goodput(
            requests=good_requests,
            requests_per_second=good_requests / measured if measured > 0 else 0.0,
            output_tokens_per_second=good_output_tokens / measured if measured > 0 else 0.0,
        ),
    )


def describe_point(result: BenchmarkResult) -> str:
    """A benchmark as a person names it: its strategy and swept values."""
    values = ", ".join(f"{name}={value}" for name, value in result.swept.items())
    return f"{result.strategy} ({values})" if values else result.strategy


def none_met_budget(highest: str, every_repeat: bool = False) -> Recommendation:
    """The recommendation when no benchmark met the budget: none, with the fastest of those that missed it named.

    ``highest`` ends the statement's last sentence, "The highest ...": the fastest benchmark and its throughput.
    ``every_repeat``: with repeats, where a point that met the budget in some repeats only does not count.
    """
    qualifier = " in every repeat" if every_repeat else ""
    return Recommendation(
        benchmark=None,
        strategy=None,
        swept={},
        output_tokens_per_second=None,
        budget=True,
        met_budget=False,
        runner_up=None,
        margin=None,
        statement=f"No benchmark met the latency budget{qualifier}; none is recommended. The highest {highest}",
    )


def recommend(results: Sequence[BenchmarkResult], budget: bool) -> Recommendation | None:
    """The highest output throughput among the benchmarks that met the budget (all, without one)."""
    ran = [(index, result) for index, result in enumerate(results) if result.requests.completed > 0]
    if not ran:
        return None
    candidates = [(index, result) for index, result in ran if not budget or (result.slo is not None and result.slo.met)]
    ranked = sorted(candidates, key=lambda pair: pair[1].throughput.output_tokens_per_second, reverse=True)
    if not ranked:
        _, best = max(ran, key=lambda pair: pair[1].throughput.output_tokens_per_second)
        return none_met_budget(
            f"output throughput, {best.throughput.output_tokens_per_second:,.1f} tokens/s, was"
            f" {describe_point(best)}{_missed(best)}."
        )
    best_index, best = ranked[0]
    rate = best.throughput.output_tokens_per_second
    runner_up: int | None = None
    margin: float | None = None
    tail = " It was the only candidate."
    if len(ranked) > 1:
        runner_up, second = ranked[1]
        second_rate = second.throughput.output_tokens_per_second
        margin = rate / second_rate - 1 if second_rate > 0 else None
        ahead = f"{margin:+.1%}" if margin is not None else "ahead"
        tail = f" {ahead} over the next best, {describe_point(second)} at {second_rate:,.1f} tokens/s."
    among = "among those that met the latency budget" if budget else "(no latency budget given)"
    statement = f"Recommended: {describe_point(best)}, {rate:,.1f} output tokens/s, the highest {among}.{tail}"
    return Recommendation(
        benchmark=best_index,
        strategy=best.strategy,
        swept=dict(best.swept),
        output_tokens_per_second=rate,
        budget=budget,
        met_budget=True,
        runner_up=runner_up,
        margin=margin,
        statement=statement,
    )


def _missed(result: BenchmarkResult) -> str:
    if result.slo is None:
        return ""
    missed = [target for target in result.slo.targets if not target.met]
    parts = [
        f"{target.name} {'no data' if target.observed is None else f'{target.observed:.4g} s'} > {target.target:g} s"
        for target in missed
    ]
    return f", which missed {', '.join(parts)}" if parts else ""
