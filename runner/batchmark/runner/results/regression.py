"""Did a run regress against its baseline? Per benchmark both runs hold, the candidate's output throughput against
the baseline's: the relative change, its 95% interval and the p-value of the one significance rule
(``repeats.differ``, Welch's t-test at 0.05). A regression is a drop that is both significant and beyond the
threshold: a tiny significant drop (a quiet machine's repeats barely vary) is not one, nor a large drop the
repeats cannot tell from noise. Without repeats on both sides there is no verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from batchmark.runner.results.repeats import ENOUGH_REPEATS, SIGNIFICANCE, TEST, differ
from batchmark.runner.results.report import (
    BenchmarkVerdict,
    RegressionReport,
    RepeatedBenchmark,
    RunReport,
    Verdict,
)

# A drop smaller than this is not called a regression however significant (5%: the spread of single runs here).
DEFAULT_THRESHOLD = 0.05


def regression(baseline: RunReport, candidate: RunReport, threshold: float = DEFAULT_THRESHOLD) -> RegressionReport:
    theirs = {_key(entry): entry for entry in candidate.repeated or []}
    verdicts = [
        _judge(entry, theirs[_key(entry)], threshold) for entry in baseline.repeated or [] if _key(entry) in theirs
    ]
    if not baseline.repeated or not candidate.repeated:
        verdicts = _unrepeated(baseline, candidate)
    regressed = [entry for entry in verdicts if entry.verdict is Verdict.REGRESSED]
    if regressed:
        worst = min(regressed, key=lambda entry: entry.change)
        verdict, reason = (
            Verdict.REGRESSED,
            (
                f"{worst.benchmark}: output tokens/s {worst.change:+.1%} ({_interval(worst)}, {TEST}"
                f" p={worst.p_value:.3g} < {SIGNIFICANCE}), beyond the {threshold:.0%} threshold"
            ),
        )
    elif verdicts and all(entry.verdict is Verdict.NOT_REGRESSED for entry in verdicts):
        verdict = Verdict.NOT_REGRESSED
        reason = f"no benchmark's output tokens/s fell significantly by more than {threshold:.0%}"
        if any(entry.weak for entry in verdicts):
            reason += f" (weak: fewer than {ENOUGH_REPEATS} repeats on a side)"
    elif not verdicts:
        verdict, reason = Verdict.UNKNOWN, "the runs hold no benchmark in common"
    else:
        verdict = Verdict.UNKNOWN
        reason = "no verdict without repeats: run both with --repeats 3 or more"
    return RegressionReport(
        baseline=baseline.run_id, verdict=verdict, threshold=threshold, benchmarks=verdicts, reason=reason
    )


def _judge(baseline: RepeatedBenchmark, candidate: RepeatedBenchmark, threshold: float) -> BenchmarkVerdict:
    before, after = baseline.output_tokens_per_second, candidate.output_tokens_per_second
    change = after.mean / before.mean - 1 if before.mean else math.nan
    significant, p_value = differ(before.values, after.values)
    low, high = _change_interval(before.values, after.values)
    if significant is None:
        verdict = Verdict.UNKNOWN
    elif significant and change < -threshold:
        verdict = Verdict.REGRESSED
    else:
        verdict = Verdict.NOT_REGRESSED
    return BenchmarkVerdict(
        benchmark=_name(baseline),
        baseline=before.mean,
        candidate=after.mean,
        change=change,
        change_low=low,
        change_high=high,
        p_value=p_value,
        verdict=verdict,
        weak=min(before.count, after.count) < ENOUGH_REPEATS,
    )


def _unrepeated(baseline: RunReport, candidate: RunReport) -> list[BenchmarkVerdict]:
    """One repeat on a side: the change is shown, with no verdict."""
    theirs = {(entry.strategy, _swept(entry.swept)): entry for entry in candidate.benchmarks}
    verdicts: list[BenchmarkVerdict] = []
    for entry in baseline.benchmarks:
        other = theirs.get((entry.strategy, _swept(entry.swept)))
        if other is None or entry.repeat or other.repeat:
            continue
        before, after = entry.throughput.output_tokens_per_second, other.throughput.output_tokens_per_second
        verdicts.append(
            BenchmarkVerdict(
                benchmark=_label(entry.strategy, entry.swept),
                baseline=before,
                candidate=after,
                change=after / before - 1 if before else math.nan,
                change_low=None,
                change_high=None,
                p_value=None,
                verdict=Verdict.UNKNOWN,
                weak=True,
            )
        )
    return verdicts


def _change_interval(before: Sequence[float], after: Sequence[float]) -> tuple[float | None, float | None]:
    """The 95% interval of after / before - 1: Welch's interval of the difference of the log values' means (the
    ratio of geometric means), back-transformed."""
    if len(before) < 2 or len(after) < 2 or min(before) <= 0 or min(after) <= 0:
        return None, None
    from scipy import stats  # noqa: PLC0415 - scipy.stats takes seconds to import; only repeats need it

    first, second = np.log(np.asarray(before)), np.log(np.asarray(after))
    variances = first.var(ddof=1) / len(first), second.var(ddof=1) / len(second)
    spread = math.sqrt(sum(variances))
    centre = float(second.mean() - first.mean())
    if spread == 0:
        return math.exp(centre) - 1, math.exp(centre) - 1
    freedom = spread**4 / (variances[0] ** 2 / (len(first) - 1) + variances[1] ** 2 / (len(second) - 1))
    half = float(stats.t.ppf(0.975, freedom)) * spread
    return math.exp(centre - half) - 1, math.exp(centre + half) - 1


def _key(entry: RepeatedBenchmark) -> tuple[str, tuple[tuple[str, str], ...]]:
    return entry.strategy, _swept(entry.swept)


def _swept(swept: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, str(value)) for name, value in swept.items()))


def _name(entry: RepeatedBenchmark) -> str:
    return _label(entry.strategy, entry.swept)


def _label(strategy: str, swept: dict[str, Any]) -> str:
    point = ", ".join(f"{name}={value}" for name, value in swept.items())
    return f"{strategy} ({point})" if point else strategy


def _interval(entry: BenchmarkVerdict) -> str:
    if entry.change_low is None or entry.change_high is None:
        return "no interval"
    return f"95% interval {entry.change_low:+.1%} to {entry.change_high:+.1%}"


def describe(entry: BenchmarkVerdict) -> str:
    """One benchmark's verdict in a line."""
    test = "no test (one repeat)" if entry.p_value is None else f"{TEST} p={entry.p_value:.3g}"
    weak = ", weak: few repeats" if entry.weak and entry.p_value is not None else ""
    return (
        f"{entry.benchmark}: output tokens/s {entry.candidate:.4g} against {entry.baseline:.4g}, {entry.change:+.1%}"
        f" ({_interval(entry)}, {test}{weak}): regressed {entry.verdict.value}"
    )
