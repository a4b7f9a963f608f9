"""Streaming distributions: exact while small, a t-digest beyond, so memory stays bounded on any run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
from fastdigest import TDigest
from pydantic import BaseModel, ConfigDict, Field

# Exact quantiles up to this many values (800 KB of float64); past it values fold into a t-digest, whose
# error is smallest exactly in the tails (p99, p99.9) that a latency report cares about.
EXACT_LIMIT = 100_000
QUANTILES = {"median": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
# Where a summary samples the distribution for a CDF chart: even steps through the body, then denser into
# the tail, where latency charts are read. Fixed and small (55 points), so a result file stays compact.
CDF_LEVELS: tuple[float, ...] = (
    *(step / 50 for step in range(50)),
    0.99,
    0.995,
    0.999,
    0.9999,
    1.0,
)


class DistributionSummary(BaseModel):
    """Summary statistics of one measured quantity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(description="Number of values.")
    mean: float | None = Field(description="Arithmetic mean.")
    median: float | None = Field(description="50th percentile.")
    p90: float | None = Field(description="90th percentile.")
    p95: float | None = Field(description="95th percentile.")
    p99: float | None = Field(description="99th percentile.")
    p999: float | None = Field(description="99.9th percentile.")
    min: float | None = Field(description="Smallest value.")
    max: float | None = Field(description="Largest value.")
    std: float | None = Field(description="Population standard deviation.")
    exact: bool = Field(description="True when quantiles are exact, False when from a t-digest.")
    cdf: list[tuple[float, float]] | None = Field(
        default=None,
        description="Cumulative distribution as (quantile level, value) pairs at fixed levels, for charts.",
    )


class Distribution:
    """Accumulates values in chunks; mean, std, min and max stay exact at any size."""

    def __init__(self, exact_limit: int = EXACT_LIMIT) -> None:
        self._exact_limit = exact_limit
        self._chunks: list[npt.NDArray[np.float64]] = []
        self._buffered = 0
        self._digest: TDigest | None = None
        self._count = 0
        self._sum = 0.0
        self._sum_sq_dev = 0.0  # Chan et al.'s parallel update of the sum of squared deviations
        self._min = math.inf
        self._max = -math.inf

    @property
    def count(self) -> int:
        return self._count

    def add(self, value: float) -> None:
        self.extend(np.array([value], dtype=np.float64))

    def extend(self, values: npt.ArrayLike) -> None:
        array = np.asarray(values, dtype=np.float64).ravel()
        if array.size == 0:
            return
        n_new = array.size
        mean_new = float(array.mean())
        m2_new = float(((array - mean_new) ** 2).sum())
        if self._count == 0:
            self._sum_sq_dev = m2_new
        else:
            mean_old = self._sum / self._count
            delta = mean_new - mean_old
            total = self._count + n_new
            self._sum_sq_dev += m2_new + delta * delta * self._count * n_new / total
        self._count += n_new
        self._sum += float(array.sum())
        self._min = min(self._min, float(array.min()))
        self._max = max(self._max, float(array.max()))
        if self._digest is not None:
            self._digest.batch_update(cast(Sequence[float], array))
            return
        self._chunks.append(array)
        self._buffered += n_new
        if self._buffered > self._exact_limit:
            self._digest = TDigest.from_values(cast(Sequence[float], np.concatenate(self._chunks)))
            self._chunks = []
            self._buffered = 0

    def values(self) -> npt.NDArray[np.float64] | None:
        """All values, while they are still kept exactly; None once folded into the digest."""
        if self._digest is not None:
            return None
        if not self._chunks:
            return np.empty(0, dtype=np.float64)
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0]

    def quantile(self, q: float) -> float | None:
        if self._count == 0:
            return None
        exact = self.values()
        if exact is not None:
            return float(np.quantile(exact, q))
        assert self._digest is not None
        return float(self._digest.quantile(q))

    def summary(self) -> DistributionSummary:
        if self._count == 0:
            return DistributionSummary(
                count=0,
                mean=None,
                median=None,
                p90=None,
                p95=None,
                p99=None,
                p999=None,
                min=None,
                max=None,
                std=None,
                exact=True,
            )
        return DistributionSummary(
            count=self._count,
            mean=self._sum / self._count,
            min=self._min,
            max=self._max,
            std=math.sqrt(max(self._sum_sq_dev, 0.0) / self._count),
            exact=self._digest is None,
            cdf=self.cdf(),
            **{name: self.quantile(q) for name, q in QUANTILES.items()},
        )

    def cdf(self) -> list[tuple[float, float]] | None:
        """The values at ``CDF_LEVELS``: level 0 is the minimum and 1 the maximum, exact at any size."""
        if self._count == 0:
            return None
        exact = self.values()
        if exact is not None:
            values = [float(value) for value in np.quantile(exact, CDF_LEVELS)]
        else:
            assert self._digest is not None
            values = [float(self._digest.quantile(level)) for level in CDF_LEVELS]
            values[0], values[-1] = self._min, self._max
        return list(zip(CDF_LEVELS, values, strict=True))
