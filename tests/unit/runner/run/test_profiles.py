import itertools

import numpy as np
import pytest

from batchmark.runner.config.profiles import SweepProfileConfig
from batchmark.runner.run.profiles import Strategy, sweep_rates


def test_constant_arrivals_are_evenly_spaced() -> None:
    offsets = Strategy("constant", rate=4.0).arrival_offsets()
    assert offsets is not None
    assert list(itertools.islice(offsets, 5)) == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_poisson_arrivals_have_exponential_gaps_at_the_rate() -> None:
    offsets = Strategy("poisson", rate=50.0, seed=7).arrival_offsets()
    assert offsets is not None
    times = np.fromiter(itertools.islice(offsets, 20_000), dtype=float)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
    # Kolmogorov-Smirnov against the exponential law at the 1% level; the fixed seed keeps it deterministic.
    ordered = np.sort(gaps)
    expected = 1 - np.exp(-50.0 * ordered)
    n = ordered.size
    statistic = max(np.max(np.arange(1, n + 1) / n - expected), np.max(expected - np.arange(n) / n))
    assert statistic < 1.63 / np.sqrt(n)


def test_poisson_arrivals_are_reproducible_by_seed() -> None:
    first = Strategy("poisson", rate=10.0, seed=3).arrival_offsets()
    second = Strategy("poisson", rate=10.0, seed=3).arrival_offsets()
    assert first is not None
    assert second is not None
    assert list(itertools.islice(first, 100)) == list(itertools.islice(second, 100))


def test_concurrency_strategies_have_no_schedule() -> None:
    assert Strategy("throughput", max_concurrency=8).arrival_offsets() is None


def test_sweep_spreads_rates_between_synchronous_and_throughput() -> None:
    profile = SweepProfileConfig(kind="sweep", sweep_size=5)
    rates = [strategy.rate for strategy in sweep_rates(profile, 1.0, 9.0)]
    assert rates == [3.0, 5.0, 7.0]
