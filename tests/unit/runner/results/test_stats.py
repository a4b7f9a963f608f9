import math

import numpy as np
import pytest

from batchmark.runner.results.stats import Distribution


def test_summary_matches_hand_computed_values() -> None:
    distribution = Distribution()
    distribution.extend([1.0, 2.0])
    distribution.extend([3.0, 4.0])
    summary = distribution.summary()
    assert summary.count == 4
    assert summary.mean == 2.5
    assert summary.median == 2.5
    # linear interpolation between order statistics: 3 + 0.7 * (4 - 3)
    assert summary.p90 == pytest.approx(3.7)
    assert summary.p99 == pytest.approx(3.97)
    assert summary.min == 1.0
    assert summary.max == 4.0
    assert summary.std == pytest.approx(math.sqrt(1.25))
    assert summary.exact


def test_empty_distribution_has_no_values() -> None:
    summary = Distribution().summary()
    assert summary.count == 0
    assert summary.mean is None
    assert summary.p99 is None


def test_large_runs_fold_into_a_digest_with_exact_moments() -> None:
    rng = np.random.default_rng(1)
    values = rng.exponential(1.0, size=50_000)
    distribution = Distribution(exact_limit=1_000)
    for chunk in np.array_split(values, 200):
        distribution.extend(chunk)
    summary = distribution.summary()
    assert not summary.exact
    assert distribution.values() is None
    assert summary.count == values.size
    assert summary.mean == pytest.approx(values.mean(), rel=1e-9)
    assert summary.std == pytest.approx(values.std(), rel=1e-9)
    assert summary.max == values.max()
    for name, q in (("median", 0.5), ("p99", 0.99), ("p999", 0.999)):
        assert getattr(summary, name) == pytest.approx(np.quantile(values, q), rel=0.02)
