"""Repeats on the simulated engine with injected step-time noise: intervals, ties, distinguishable points.

The figures come from the simulated engine's own clock (``simulated_seconds``) with ``time_scale`` 0, so that
thousands of seeded repeats take seconds and the truth is known: the noise has mean 1 on every step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from batchmark.runner.commands.compare import noise_lines
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import Completion, EngineTimings
from batchmark.runner.engines.simulated import SamplingParams, SimulatedLLM, TokensPrompt
from batchmark.runner.results.budget import RequestBudget, recommend
from batchmark.runner.results.decision import decide, welch_p_value
from batchmark.runner.results.repeats import (
    CLIPPED_INTERVAL,
    LOG_INTERVAL,
    differ,
    estimate,
    few_repeats_warning,
    repeated_benchmarks,
)
from batchmark.runner.results.report import (
    BenchmarkResult,
    CostFigures,
    EngineSummary,
    Goodput,
    RunReport,
    SloVerdict,
    Throughput,
)
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.benchmark import visit_order
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy

OUTPUT_LENGTHS = (4, 8, 12, 16, 20, 24, 28, 32)
PROMPTS = [TokensPrompt(prompt_token_ids=[1] * 16) for _ in OUTPUT_LENGTHS]
PARAMS = [SamplingParams(max_tokens=length, min_tokens=length, ignore_eos=True) for length in OUTPUT_LENGTHS]
TOKENS = sum(OUTPUT_LENGTHS)


def engine(noise: float, seed: int, slower: float = 1.0) -> SimulatedLLM:
    """``slower`` scales every step cost: throughput divides by it."""
    return SimulatedLLM(
        model="m",
        time_scale=0.0,
        step_fixed_seconds=0.004 * slower,
        batched_token_seconds=3e-6 * slower,
        context_token_seconds=3.7e-8 * slower,
        step_time_noise=noise,
        noise_seed=seed,
    )


def throughputs(llm: SimulatedLLM, repeats: int) -> list[float]:
    """Output tokens per simulated second of ``repeats`` runs of the same workload on one engine."""
    values = []
    for _ in range(repeats):
        before = llm.simulated_seconds
        llm.generate(PROMPTS, PARAMS)
        values.append(TOKENS / (llm.simulated_seconds - before))
    return values


def test_the_interval_is_students_t_on_the_log_values() -> None:
    figure = estimate([10.0, 12.0, 14.0])
    # The logs: mean 2.47552, s = 0.168434; t(0.975, 2) = 4.3027: half-width 4.3027 * 0.168434 / sqrt(3) = 0.41842,
    # back-transformed around the geometric mean exp(2.47552) = 11.888 (the raw t interval was 12 ± 4.968).
    assert figure.mean == pytest.approx(12.0)
    assert figure.std == pytest.approx(2.0)
    assert figure.geometric_mean == pytest.approx(11.888, abs=1e-3)
    assert figure.low == pytest.approx(11.888 / math.exp(0.41842), abs=1e-3)
    assert figure.high == pytest.approx(11.888 * math.exp(0.41842), abs=1e-3)
    assert figure.relative_spread == pytest.approx(2 / 12)
    assert figure.interval_method == LOG_INTERVAL
    assert figure.values == [10.0, 12.0, 14.0]
    single = estimate([5.0])
    assert (single.mean, single.low, single.high, single.std, single.interval_method) == (5.0, None, None, None, None)


def test_two_repeats_never_give_an_interval_below_zero() -> None:
    # The issue's case: at N = 2 the raw t interval of these was about -1,731.7 to 3,485.7 tokens/s.
    figure = estimate([1000.0, 1754.0])
    assert figure.low is not None
    assert figure.high is not None
    assert 0 < figure.low < min(figure.values)
    assert figure.high > max(figure.values)
    spread = np.random.default_rng(0)
    for _ in range(1000):
        pair = list(spread.lognormal(mean=5.0, sigma=1.5, size=2))
        low = estimate(pair).low
        assert low is not None
        assert low > 0


def test_a_zero_repeat_clips_the_raw_interval_at_zero() -> None:
    # Goodput is 0 when no request met its targets: no log, so the raw t interval, clipped to the quantity's range.
    figure = estimate([0.0, 10.0])
    assert figure.interval_method == CLIPPED_INTERVAL
    assert figure.geometric_mean is None
    assert figure.low == 0.0
    assert figure.high == pytest.approx(5.0 + 12.706 * math.sqrt(50) / math.sqrt(2), abs=1e-2)
    nothing = estimate([0.0, 0.0, 0.0])
    assert (nothing.low, nothing.high) == (0.0, 0.0)


def test_fewer_than_three_repeats_warn() -> None:
    two = repeated_benchmarks(two_points([100.0, 110.0], [90.0, 95.0]), {})
    warning = few_repeats_warning(two)
    assert warning is not None
    assert warning.startswith("warning: only 2 repeats")
    assert "--repeats 3 or more" in warning
    three = repeated_benchmarks(two_points([100.0, 110.0, 105.0], [90.0, 95.0, 93.0]), {})
    assert few_repeats_warning(three) is None
    assert few_repeats_warning([]) is None


def test_intervals_cover_the_true_value_at_their_stated_rate() -> None:
    # The truth: the figure's expectation, from many repeats (the noise keeps every step's mean time).
    truth = float(np.mean(throughputs(engine(0.5, seed=10_000), 10_000)))
    quiet = throughputs(engine(0.0, seed=0), 1)[0]
    assert truth == pytest.approx(quiet, rel=0.01)
    runs = 1000
    covered = 0
    for seed in range(runs):
        figure = estimate(throughputs(engine(0.5, seed=seed), 5))
        assert figure.low is not None
        assert figure.high is not None
        covered += figure.low <= truth <= figure.high
    # 95% stated; three binomial standard deviations (0.0069 at 1000 runs) either side.
    assert 0.929 <= covered / runs <= 0.971


def result(
    rate: float, point: int, repeat: int, met: bool | None = None, latency: float = 1.0, gpu_price: float | None = None
) -> BenchmarkResult:
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0, RequestBudget({}))
    aggregator.on_issue(0, 0.0)
    timings = EngineTimings(0.0, latency / 10, latency * 0.9, latency / 10)
    report = BatchReport(0, True, 0.0, 0.0, latency, [Completion(0, 5, 10, None, timings)], 0)
    aggregator.on_batch(BatchEvent(report, [0.0], [True]))
    base = aggregator.finish(
        end=latency, stop_reason="max_requests", incomplete=0, interrupted=False, strategy=Strategy("throughput", 4)
    )
    update: dict[str, Any] = {
        "throughput": Throughput(
            requests_per_second=rate / 10,
            output_tokens_per_second=rate,
            prompt_tokens_per_second=rate / 2,
            total_tokens_per_second=rate * 1.5,
        ),
        "swept": {"batch_size": 2**point},
        "batch_size": 2**point,
        "point": point,
        "repeat": repeat,
    }
    if gpu_price is not None:
        update["cost"] = CostFigures(
            gpus=1,
            gpu_cost_per_hour=gpu_price,
            per_million_output_tokens=gpu_price / 3600 / rate * 1e6,
            per_million_total_tokens=gpu_price / 3600 / (rate * 1.5) * 1e6,
        )
    if met is not None:
        update["slo"] = SloVerdict(
            met=met, targets=[], goodput=Goodput(requests=1, requests_per_second=1, output_tokens_per_second=rate)
        )
    return base.model_copy(update=update)


def two_points(first: list[float], second: list[float], **kwargs: Any) -> list[BenchmarkResult]:
    """The two points' repeats interleaved, as the runner orders them."""
    results = []
    for repeat, (a, b) in enumerate(zip(first, second, strict=True)):
        results += [result(a, 0, repeat, **kwargs), result(b, 1, repeat, **kwargs)]
    return results


def verdict_of(first: list[float], second: list[float]) -> str | None:
    results = two_points(first, second)
    chosen = decide(repeated_benchmarks(results, {}), results, False, "request_latency_p99")
    assert chosen is not None
    return chosen.certainty


def test_equal_true_throughput_comes_out_tied() -> None:
    trials = 100
    tied = sum(
        verdict_of(throughputs(engine(0.5, seed), 5), throughputs(engine(0.5, seed + 50_000), 5)) == "tied"
        for seed in range(trials)
    )
    # Welch's test at 0.05 calls an equal pair distinguishable about 5% of the time.
    assert tied / trials >= 0.9


def test_ten_percent_apart_is_distinguishable_with_enough_repeats() -> None:
    trials = 100

    def distinguishable(repeats: int) -> float:
        calls = 0
        for seed in range(trials):
            fast = throughputs(engine(0.3, seed), repeats)
            slow = throughputs(engine(0.3, seed + 50_000, slower=1 / 0.9), repeats)  # 10% less throughput
            calls += verdict_of(fast, slow) == "distinguishable"
        return calls / trials

    spread = estimate(throughputs(engine(0.3, seed=99_999), 1000)).relative_spread
    assert spread is not None
    assert 0.04 < spread < 0.1
    assert distinguishable(20) >= 0.9
    # With two repeats the same gap is mostly lost in the noise: the repeats are what tell it.
    assert distinguishable(2) < 0.5


def test_a_tie_goes_to_the_lower_latency_with_the_reason() -> None:
    results = []
    for repeat, (a, b) in enumerate([(100.0, 101.0), (102.0, 99.0), (98.0, 100.0)]):
        results += [result(a, 0, repeat, latency=2.0), result(b, 1, repeat, latency=1.0)]
    chosen = decide(repeated_benchmarks(results, {}), results, False, "request_latency_p99")
    assert chosen is not None
    assert chosen.certainty == "tied"
    assert chosen.test == "Welch's t-test"
    assert chosen.swept == {"batch_size": 2}
    assert sorted(chosen.tied) == [0, 1]
    assert "Tied on output throughput" in chosen.statement
    assert "the significantly lowest mean request_latency_p99 of the tied" in chosen.statement


def batch_16_and_32(gpu_price: float | None) -> list[BenchmarkResult]:
    """The issue's case, 2 repeats: batch 32 has 22% more mean throughput, not significant at N = 2, and a 0.5%
    higher latency, within the noise too."""
    results = []
    rows = [((1000.0, 1.000), (1100.0, 1.005)), ((1100.0, 1.010), (1462.0, 1.015))]
    for repeat, ((rate_16, latency_16), (rate_32, latency_32)) in enumerate(rows):
        results += [
            result(rate_16, 4, repeat, latency=latency_16, gpu_price=gpu_price),
            result(rate_32, 5, repeat, latency=latency_32, gpu_price=gpu_price),
        ]
    return results


def test_a_latency_difference_within_the_noise_does_not_outweigh_more_throughput() -> None:
    priced = batch_16_and_32(gpu_price=2.0)
    repeated = repeated_benchmarks(priced, {})
    assert repeated[1].output_tokens_per_second.mean / repeated[0].output_tokens_per_second.mean == pytest.approx(
        1.22, abs=0.005
    )
    chosen = decide(repeated, priced, False, "request_latency_p99")
    assert chosen is not None
    assert chosen.certainty == "tied"
    # Batch 32 costs less per token; before, the 0.5% lower latency of batch 16 decided.
    assert chosen.swept == {"batch_size": 32}
    assert "the lowest mean cost of the tied" in chosen.statement
    assert "did not differ significantly" in chosen.statement
    # Without a price the smaller batch is recommended, and the latency is not the reason.
    unpriced = batch_16_and_32(gpu_price=None)
    chosen = decide(repeated_benchmarks(unpriced, {}), unpriced, False, "request_latency_p99")
    assert chosen is not None
    assert chosen.swept == {"batch_size": 16}
    assert "the smallest batch of the tied (16" in chosen.statement
    assert "lowest mean request_latency_p99" not in chosen.statement


def test_a_significant_latency_difference_still_breaks_a_tie() -> None:
    results = []
    for repeat, (a, b) in enumerate([(100.0, 101.0), (102.0, 99.0), (98.0, 100.0)]):
        results += [
            result(a, 0, repeat, latency=2.0 + repeat / 100, gpu_price=2.0),
            result(b, 1, repeat, latency=1.0 + repeat / 100, gpu_price=2.0),
        ]
    chosen = decide(repeated_benchmarks(results, {}), results, False, "request_latency_p99")
    assert chosen is not None
    assert chosen.swept == {"batch_size": 2}
    assert "the significantly lowest mean request_latency_p99 of the tied" in chosen.statement


def run_report(results: list[BenchmarkResult], repeats: int) -> RunReport:
    repeated = repeated_benchmarks(results, {})
    return RunReport(
        name="r",
        run_id="id",
        batchmark_version="0",
        created_at="2026-01-01T00:00:00Z",
        engine=EngineSummary(
            kind="simulated", simulated=True, model="m", version=None, gpu_name=None, load_seconds=0.0, details={}
        ),
        environment={},
        config={},
        complete=True,
        benchmarks=results,
        repeats=repeats,
        repeated=repeated,
        recommendation=decide(repeated, results, False, "request_latency_p99"),
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # Intervals that overlap although the test tells the means apart: the old compare said "within noise".
        ([100.0, 102.0, 104.0, 101.0, 103.0], [103.0, 105.0, 107.0, 104.0, 106.0]),
        ([100.0, 110.0, 105.0], [101.0, 109.0, 104.0]),
        ([1000.0, 1100.0], [1100.0, 1462.0]),
    ],
)
def test_compare_and_the_recommendation_agree_on_a_pair(first: list[float], second: list[float]) -> None:
    one = run_report([result(rate, 0, repeat) for repeat, rate in enumerate(first)], len(first))
    other = run_report([result(rate, 0, repeat) for repeat, rate in enumerate(second)], len(second))
    line = next(line for line in noise_lines([("a", one), ("b", other)]) if ", output_tokens_per_second:" in line)
    both = two_points(first, second)
    chosen = decide(repeated_benchmarks(both, {}), both, False, "request_latency_p99")
    assert chosen is not None
    distinct, _ = differ(first, second)
    assert (chosen.certainty == "distinguishable") == distinct
    assert ("differs (" in line) == distinct
    assert ("within noise" in line) == (not distinct)


def test_a_point_meeting_the_budget_in_some_repeats_only_is_not_met() -> None:
    results = [
        result(200.0, 0, 0, met=True),
        result(100.0, 1, 0, met=True),
        result(210.0, 0, 1, met=False),
        result(101.0, 1, 1, met=True),
        result(205.0, 0, 2, met=True),
        result(99.0, 1, 2, met=True),
    ]
    repeated = repeated_benchmarks(results, {"request_latency_p99": 5.0})
    assert [entry.slo for entry in repeated] == ["some", "met"]
    assert repeated[0].slo_met_repeats == 2
    chosen = decide(repeated, results, True, "request_latency_p99")
    assert chosen is not None
    assert chosen.swept == {"batch_size": 2}
    assert "met the latency budget in 2 of 3 repeats only, so it is not counted as meeting it" in chosen.statement
    assert chosen.certainty is None  # the only candidate


def test_no_point_met_in_every_repeat_is_the_same_recommendation_as_a_single_runs() -> None:
    results = [
        result(200.0, 0, 0, met=True),
        result(100.0, 1, 0, met=False),
        result(210.0, 0, 1, met=False),
        result(101.0, 1, 1, met=False),
    ]
    chosen = decide(repeated_benchmarks(results, {"request_latency_p99": 5.0}), results, True, "request_latency_p99")
    single = recommend(results[1:], budget=True)  # on its own, each of these missed the budget
    assert chosen is not None
    assert single is not None
    # Built by one builder: the same fields, only the statement's sentence after "none is recommended." differs.
    assert chosen.model_dump(exclude={"statement"}) == single.model_dump(exclude={"statement"})
    assert (chosen.benchmark, chosen.met_budget, chosen.budget, chosen.certainty) == (None, False, True, None)
    assert chosen.statement.startswith("No benchmark met the latency budget in every repeat; none is recommended.")
    assert "The highest mean output throughput was throughputx4 (batch_size=1) at 205.0 tokens/s" in chosen.statement
    assert "met the latency budget in 1 of 2 repeats only" in chosen.statement


def test_welch_without_spread_and_with_one_repeat() -> None:
    assert welch_p_value([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert welch_p_value([1.0, 1.0], [2.0, 2.0]) == 0.0
    assert welch_p_value([1.0], [2.0, 3.0]) is None


def test_rounds_interleave_points_that_share_an_engine_and_shuffle_after_the_first() -> None:
    order = visit_order(["a", "a", "a", "b", "b"], 3, seed=1)
    assert len(order) == 15
    assert order[:3] == [(0, 0), (1, 0), (2, 0)]
    # Every round of the first engine visits each of its points once before the next round starts.
    for repeat in range(3):
        assert sorted(point for point, r in order[:9] if r == repeat) == [0, 1, 2]
    assert [r for _, r in order[:9]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # The second engine's points come after, so it loads once.
    assert {point for point, _ in order[9:]} == {3, 4}
    assert order == visit_order(["a", "a", "a", "b", "b"], 3, seed=1)
    assert visit_order(["a", "b"], 1, seed=0) == [(0, 0), (1, 0)]
