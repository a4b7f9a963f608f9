"""The recommendation of a run with repeats: the best point within the budget, and how sure that is.

The best point is the one with the highest mean output throughput among those that met the budget in every
repeat. Whether it beats the runner-up is ``repeats.differ`` (Welch's t-test at 0.05, the rule ``batchmark
compare`` uses too) on the repeats' output throughputs. Points it cannot tell from the best are tied with it,
and the same test breaks the tie: a point with a significantly lower latency (the budget's first statistic) is
recommended, else the one with the lowest mean cost per million output tokens (with a GPU price), else the
smallest batch, with that reason. A latency only a little lower, within the noise, never outweighs a higher
throughput. A point that met the budget in some repeats only is named as such and never counted as meeting it.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchmark.runner.results.budget import none_met_budget
from batchmark.runner.results.repeats import SIGNIFICANCE, TEST, differ, welch_p_value
from batchmark.runner.results.report import BenchmarkResult, Recommendation, RepeatedBenchmark

__all__ = ["SIGNIFICANCE", "TEST", "decide", "describe", "welch_p_value"]


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
    distinct, p_value = differ(rates(repeated[fastest]), rates(repeated[runner_up]))
    tied = [fastest] + [
        index for index in ranked[1:] if differ(rates(repeated[fastest]), rates(repeated[index]))[0] is False
    ]
    versus = f"{describe(repeated[runner_up])} at {_rate(repeated[runner_up])}"
    if distinct is None or p_value is None:
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
    if distinct:
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


def _latency_narrowed(repeated: Sequence[RepeatedBenchmark], tied: list[int], latency_name: str) -> list[int]:
    """The tied points whose latency is not significantly above the lowest's, lowest first (all of them, in order,
    when a tied point has no such latency)."""
    figures = {index: repeated[index].latency.get(latency_name) for index in tied}
    known = {index: figure for index, figure in figures.items() if figure is not None}
    if len(known) < len(tied):
        return tied
    lowest = min(tied, key=lambda index: known[index].mean)
    return [lowest] + [
        index for index in tied if index != lowest and differ(known[lowest].values, known[index].values)[0] is not True
    ]


def _break_tie(repeated: Sequence[RepeatedBenchmark], tied: list[int], latency_name: str) -> tuple[int, str]:
    """A significantly lower latency decides a tie (by the same test as the throughput's), else the lower mean cost
    per million output tokens (with a GPU price), else the smallest batch; each step keeps only the points the one
    before could not tell apart. A latency within the noise never outweighs a higher throughput."""
    remaining = _latency_narrowed(repeated, tied, latency_name)

    def latency(index: int) -> str:
        figure = repeated[index].latency.get(latency_name)
        return "n/a" if figure is None else f"{figure.mean:.4g} s"

    if len(remaining) == 1:
        chosen = remaining[0]
        others = ", ".join(latency(index) for index in tied if index != chosen)
        return chosen, (
            f"the significantly lowest mean {latency_name} of the tied: {latency(chosen)} against {others} ({TEST},"
            f" p < {SIGNIFICANCE})"
        )
    undecided = f"; their mean {latency_name} did not differ significantly ({TEST}, p >= {SIGNIFICANCE})"
    costs = {index: repeated[index].cost_per_million_output_tokens for index in remaining}
    priced = {index: figure.mean for index, figure in costs.items() if figure is not None}
    if len(priced) == len(remaining) and len(set(priced.values())) > 1:
        chosen = min(remaining, key=lambda index: priced[index])
        others = ", ".join(f"{priced[index]:.4g}" for index in remaining if index != chosen)
        return chosen, (
            f"the lowest mean cost of the tied: {priced[chosen]:.4g} per million output tokens against {others}"
            f"{undecided}"
        )
    sizes = {index: repeated[index].batch_size for index in remaining}
    known_sizes = {index: size for index, size in sizes.items() if size is not None}
    if len(known_sizes) == len(remaining) and len(set(known_sizes.values())) > 1:
        chosen = min(remaining, key=lambda index: known_sizes[index])
        return (
            chosen,
            f"the smallest batch of the tied ({known_sizes[chosen]}, no GPU price to compare costs){undecided}",
        )
    chosen = max(remaining, key=lambda index: repeated[index].output_tokens_per_second.mean)
    return chosen, f"the highest mean output throughput of the tied{undecided}"


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
