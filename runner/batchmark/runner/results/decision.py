"""The recommendation of a run with repeats: the best point within the budget, and how sure that is.

The best point is the one with the highest mean output throughput among those that met the budget in every
repeat. Whether it beats the runner-up is Welch's t-test on the repeats' output throughputs (two-sided, no
assumption of equal variances). Points the test cannot tell from the best are tied with it, and the one with
the lowest cost per million tokens (when the tied points occupy different GPU counts) or else the lowest
latency is recommended, with that reason. A point that met the budget in some repeats only is named as such and
never counted as meeting it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from batchmark.runner.results.budget import none_met_budget
from batchmark.runner.results.report import BenchmarkResult, Recommendation, RepeatedBenchmark

SIGNIFICANCE = 0.05
TEST = "Welch's t-test"


def welch_p_value(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided p-value that the two means differ; None with fewer than two values on a side."""
    if len(first) < 2 or len(second) < 2:
        return None
    if np.std(first) == 0 and np.std(second) == 0:
        # No spread at all (a noiseless simulation): the means either differ or they do not.
        return 0.0 if float(np.mean(first)) != float(np.mean(second)) else 1.0
    result = stats.ttest_ind(first, second, equal_var=False)
    p_value = float(result.pvalue)
    return None if math.isnan(p_value) else p_value


def describe(entry: RepeatedBenchmark) -> str:
    values = ", ".join(f"{name}={value}" for name, value in entry.swept.items())
    return f"{entry.strategy} ({values})" if values else entry.strategy


def _rate(entry: RepeatedBenchmark) -> str:
    figure = entry.output_tokens_per_second
    if figure.low is None or figure.high is None:
        return f"{figure.mean:,.1f} tokens/s (1 repeat)"
    return f"{figure.mean:,.1f} tokens/s (95% CI {figure.low:,.1f} to {figure.high:,.1f}, {figure.count} repeats)"


def _partial_note(repeated: Sequence[RepeatedBenchmark]) -> str:
    notes = [
        f"{describe(entry)} met the latency budget in {entry.slo_met_repeats} of {len(entry.benchmarks)} repeats"
        " only, so it is not counted as meeting it"
        for entry in repeated
        if entry.slo == "some"
    ]
    return f" {'; '.join(notes)}." if notes else ""


def decide(
    repeated: Sequence[RepeatedBenchmark], results: Sequence[BenchmarkResult], budget: bool, latency_name: str
) -> Recommendation | None:
    """The recommendation over repeated benchmarks; ``latency_name`` is the statistic that breaks a tie."""
    if not repeated:
        return None

    def rates(entry: RepeatedBenchmark) -> list[float]:
        return [results[index].throughput.output_tokens_per_second for index in entry.benchmarks]

    partial = _partial_note(repeated)
    candidates = [index for index, entry in enumerate(repeated) if not budget or entry.slo == "met"]
    ranked = sorted(candidates, key=lambda index: repeated[index].output_tokens_per_second.mean, reverse=True)
    if not ranked:
        best = max(repeated, key=lambda entry: entry.output_tokens_per_second.mean)
        return none_met_budget(
            f"mean output throughput was {describe(best)} at {_rate(best)}.{partial}", every_repeat=True
        )
    fastest = ranked[0]
    among = "among those that met the latency budget in every repeat" if budget else "(no latency budget given)"
    if len(ranked) == 1:
        return _recommendation(
            repeated,
            fastest,
            None,
            budget,
            certainty=None,
            p_value=None,
            tied=[fastest],
            statement=f"Recommended: {describe(repeated[fastest])}, {_rate(repeated[fastest])}, the only candidate"
            f" {among}.{partial}",
        )
    runner_up = ranked[1]
    p_value = welch_p_value(rates(repeated[fastest]), rates(repeated[runner_up]))
    tied = [fastest] + [
        index
        for index in ranked[1:]
        if (value := welch_p_value(rates(repeated[fastest]), rates(repeated[index]))) is not None
        and value >= SIGNIFICANCE
    ]
    versus = f"{describe(repeated[runner_up])} at {_rate(repeated[runner_up])}"
    if p_value is None:
        return _recommendation(
            repeated,
            fastest,
            runner_up,
            budget,
            certainty="unknown",
            p_value=None,
            tied=[fastest],
            statement=f"Recommended: {describe(repeated[fastest])}, {_rate(repeated[fastest])}, the highest mean"
            f" {among}; whether it beats the runner-up, {versus}, is unknown: {TEST} needs at least 2 repeats"
            f" of each.{partial}",
        )
    if p_value < SIGNIFICANCE:
        return _recommendation(
            repeated,
            fastest,
            runner_up,
            budget,
            certainty="distinguishable",
            p_value=p_value,
            tied=[fastest],
            statement=f"Recommended: {describe(repeated[fastest])}, {_rate(repeated[fastest])}, the highest mean"
            f" {among}, distinguishable from the runner-up, {versus} ({TEST}, p={p_value:.3g} <"
            f" {SIGNIFICANCE}).{partial}",
        )
    chosen, reason = _break_tie(repeated, tied, latency_name)
    names = ", ".join(describe(repeated[index]) for index in tied)
    return _recommendation(
        repeated,
        chosen,
        runner_up,
        budget,
        certainty="tied",
        p_value=p_value,
        tied=tied,
        statement=f"Tied on output throughput {among}: {describe(repeated[fastest])} at {_rate(repeated[fastest])}"
        f" is not distinguishable from the runner-up, {versus} ({TEST}, p={p_value:.3g} >= {SIGNIFICANCE}; tied:"
        f" {names}). Recommended: {describe(repeated[chosen])}, {reason}.{partial}",
    )


def _break_tie(repeated: Sequence[RepeatedBenchmark], tied: list[int], latency_name: str) -> tuple[int, str]:
    """The cheapest of the tied points when they occupy different GPU counts, else the lowest latency."""
    priced = [index for index in tied if repeated[index].cost_per_million_output_tokens is not None]
    if len(priced) == len(tied) and len({repeated[index].gpus for index in tied}) > 1:

        def cost(index: int) -> float:
            figure = repeated[index].cost_per_million_output_tokens
            return figure.mean if figure is not None else math.inf

        chosen = min(tied, key=cost)
        others = ", ".join(f"{cost(index):.4g}" for index in tied if index != chosen)
        return chosen, f"the cheapest of the tied: {cost(chosen):.4g} per million output tokens against {others}"

    def latency(index: int) -> float:
        figure = repeated[index].latency.get(latency_name)
        return figure.mean if figure is not None else math.inf

    chosen = min(tied, key=latency)
    if math.isinf(latency(chosen)):
        return tied[0], "the highest mean output throughput of the tied (no latency to tell them apart)"
    others = ", ".join(f"{latency(index):.4g} s" for index in tied if index != chosen)
    return chosen, f"the lowest mean {latency_name} of the tied: {latency(chosen):.4g} s against {others}"


def _recommendation(
    repeated: Sequence[RepeatedBenchmark],
    chosen: int,
    runner_up: int | None,
    budget: bool,
    certainty: str | None,
    p_value: float | None,
    tied: list[int],
    statement: str,
) -> Recommendation:
    entry = repeated[chosen]
    margin = None
    if runner_up is not None:
        # The fastest's lead over the runner-up, whichever of the tied is recommended.
        first = repeated[tied[0]].output_tokens_per_second.mean
        second = repeated[runner_up].output_tokens_per_second.mean
        margin = first / second - 1 if second > 0 else None
    return Recommendation.model_validate(
        {
            "benchmark": entry.benchmarks[0],
            "strategy": entry.strategy,
            "swept": dict(entry.swept),
            "output_tokens_per_second": entry.output_tokens_per_second.mean,
            "budget": budget,
            "met_budget": True,
            "runner_up": repeated[runner_up].benchmarks[0] if runner_up is not None else None,
            "margin": margin,
            "statement": statement,
            "certainty": certainty,
            "test": TEST if p_value is not None else None,
            "p_value": p_value,
            "tied": tied,
            "repeated": chosen,
        }
    )
