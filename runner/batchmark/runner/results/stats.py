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


# A sketch's centroids: enough for p99 within about 1% after merging (a t-digest's error is smallest
# in the tails), and small enough that a results file of a long sweep stays well within a ConfigMap.
SKETCH_CENTROIDS = 100


class Sketch(BaseModel):
    """A mergeable summary of one distribution: a t-digest's centroids, so that the distributions of runs measured
    apart (engine replicas in several pods) merge into one (`batchmark merge`), never by averaging percentiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(description="Number of values.")
    min: float = Field(description="Smallest value.")
    max: float = Field(description="Largest value.")
    centroids: list[tuple[float, float]] = Field(description="(mean, weight) of each centroid, by mean.")

    def digest(self) -> TDigest:
        return TDigest.from_dict(
            {
                "max_centroids": SKETCH_CENTROIDS,
                "mass": float(sum(weight for _, weight in self.centroids)),
                "sum": float(sum(mean * weight for mean, weight in self.centroids)),
                "min": self.min,
                "max": self.max,
                "n_values": self.count,
                "centroids": [{"m": mean, "c": weight} for mean, weight in self.centroids],
            }
        )


def merged_summary(parts: Sequence[tuple[DistributionSummary, Sketch | None]]) -> DistributionSummary:
    """One distribution of several measured apart: count, mean, min, max and std exact (pooled), quantiles and the
    CDF from their merged sketches (a part without values adds nothing)."""
    parts = [(summary, sketch) for summary, sketch in parts if summary.count > 0]
    if not parts:
        return Distribution().summary()
    count = sum(summary.count for summary, _ in parts)
    mean = sum((summary.mean or 0.0) * summary.count for summary, _ in parts) / count
    # Each part's squared deviations about its own mean, plus its count times its mean's distance from the whole's.
    squares = sum(
        summary.count * ((summary.std or 0.0) ** 2 + ((summary.mean or 0.0) - mean) ** 2) for summary, _ in parts
    )
    digests = [sketch.digest() for _, sketch in parts if sketch is not None]
    if len(digests) < len(parts):
        raise ValueError("a part has values but no sketch to merge them by")
    merged = digests[0]
    for digest in digests[1:]:
        merged = merged.merge(digest)
    low = min(summary.min for summary, _ in parts if summary.min is not None)
    high = max(summary.max for summary, _ in parts if summary.max is not None)
    cdf = [float(merged.quantile(level)) for level in CDF_LEVELS]
    cdf[0], cdf[-1] = low, high
    return DistributionSummary(
        count=count,
        mean=mean,
        min=low,
        max=high,
        std=math.sqrt(max(squares, 0.0) / count),
        exact=False,
        cdf=list(zip(CDF_LEVELS, cdf, strict=True)),
        **{name: float(merged.quantile(q)) for name, q in QUANTILES.items()},
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

    def sketch(self) -> Sketch | None:
        """Its mergeable sketch; None without values."""
        if self._count == 0:
            return None
        exact = self.values()
        if exact is not None:
            digest = TDigest.from_values(cast(Sequence[float], exact), max_centroids=SKETCH_CENTROIDS)
        else:
            assert self._digest is not None
            digest = TDigest.from_dict({**self._digest.to_dict(), "max_centroids": SKETCH_CENTROIDS})
            digest.merge_inplace(TDigest.from_values([], max_centroids=SKETCH_CENTROIDS))  # compresses it to the bound
        listed = cast(list[dict[str, float]], digest.to_dict()["centroids"])
        centroids = [(float(f"{centroid['m']:.7g}"), float(centroid["c"])) for centroid in listed]
        return Sketch(count=self._count, min=self._min, max=self._max, centroids=centroids)

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
