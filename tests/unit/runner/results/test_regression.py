"""The regression rule: a drop both significant (Welch's t-test at 0.05 on the repeats) and beyond the threshold."""

from __future__ import annotations

import pytest

from batchmark.runner.results.regression import regression
from batchmark.runner.results.repeats import estimate
from batchmark.runner.results.report import RepeatedBenchmark, RunReport, Verdict
from tests.unit.observability_data import simple_report


def run(*throughputs: float) -> RunReport:
    """A run whose one benchmark's repeats gave these output tokens/s."""
    figure = estimate(list(throughputs))
    entry = RepeatedBenchmark(
        point=0,
        strategy="throughput",
        swept={},
        batch_size=8,
        benchmarks=list(range(len(throughputs))),
        requests_per_second=figure,
        output_tokens_per_second=figure,
        total_tokens_per_second=figure,
        goodput_output_tokens_per_second=None,
        cost_per_million_output_tokens=None,
        gpus=None,
        latency={},
        slo_met_repeats=None,
        slo=None,
    )
    return simple_report().model_copy(update={"repeated": [entry], "repeats": len(throughputs)})


@pytest.mark.parametrize(
    ("baseline", "candidate", "verdict"),
    [
        ((100, 101, 99, 100, 100), (80, 81, 79, 80, 80), Verdict.REGRESSED),  # -20%, p far below 0.05
        ((100, 100.1, 99.9, 100, 100), (98, 98.1, 97.9, 98, 98), Verdict.NOT_REGRESSED),  # -2%: significant, small
        ((100, 140, 60, 100, 100), (80, 120, 40, 80, 80), Verdict.NOT_REGRESSED),  # -20%, within the noise
        ((100, 101, 99), (120, 121, 119), Verdict.NOT_REGRESSED),  # faster
    ],
    ids=["a significant drop beyond the threshold", "a significant drop within it", "a noisy drop", "faster"],
)
def test_the_rule(baseline: tuple[float, ...], candidate: tuple[float, ...], verdict: Verdict) -> None:
    report = regression(run(*baseline), run(*candidate), threshold=0.05)
    assert report.verdict is verdict, report.reason
    (entry,) = report.benchmarks
    assert entry.change == pytest.approx(sum(candidate) / sum(baseline) * len(baseline) / len(candidate) - 1)
    assert entry.change_low is not None
    assert entry.change_high is not None
    assert entry.change_low < entry.change_high
    # The interval (of the geometric means' ratio) is the one the verdict's reason quotes.
    assert (entry.change_high < -0.05) == (verdict is Verdict.REGRESSED) or entry.p_value is not None


def test_no_verdict_without_repeats_and_a_weak_one_with_few() -> None:
    assert regression(run(100), run(50)).verdict is Verdict.UNKNOWN
    weak = regression(run(100, 101), run(100, 99))
    assert weak.verdict is Verdict.NOT_REGRESSED
    assert "weak" in weak.reason
    regressed = regression(run(100, 101, 99), run(50, 51, 49))
    assert regressed.verdict is Verdict.REGRESSED
    assert "-50.0%" in regressed.reason
