"""When requests are issued: arrival processes and concurrency caps, one per benchmark of a profile."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from batchmark.runner.config.profiles import (
    ConcurrentProfileConfig,
    ConstantProfileConfig,
    PoissonProfileConfig,
    SweepProfileConfig,
    SynchronousProfileConfig,
    ThroughputProfileConfig,
)

AnyProfile = (
    SynchronousProfileConfig
    | ConcurrentProfileConfig
    | ThroughputProfileConfig
    | ConstantProfileConfig
    | PoissonProfileConfig
    | SweepProfileConfig
)


@dataclass(frozen=True)
class Strategy:
    """One benchmark's issuing rule: arrivals at ``rate`` (or as soon as allowed), at most ``max_concurrency``
    requests in flight."""

    kind: str  # synchronous | concurrent | throughput | constant | poisson
    max_concurrency: int | None = None
    rate: float | None = None
    seed: int = 42

    @property
    def label(self) -> str:
        if self.rate is not None:
            return f"{self.kind}@{self.rate:.4g}/s"
        if self.kind in ("concurrent", "throughput") and self.max_concurrency is not None:
            return f"{self.kind}x{self.max_concurrency}"
        return self.kind

    def arrival_offsets(self) -> Iterator[float] | None:
        """Seconds after the start at which request i becomes due; None: due as soon as a slot is free."""
        if self.rate is None:
            return None
        if self.kind == "poisson":
            return _poisson_offsets(self.rate, self.seed)
        return _constant_offsets(self.rate)


def _constant_offsets(rate: float) -> Iterator[float]:
    index = 0
    while True:
        yield index / rate
        index += 1


def _poisson_offsets(rate: float, seed: int) -> Iterator[float]:
    rng = np.random.default_rng(seed)
    elapsed = 0.0
    while True:
        # Draw in blocks: one numpy call per 4096 arrivals keeps the issuing loop cheap.
        for gap in rng.exponential(1.0 / rate, size=4096):
            yield elapsed
            elapsed += float(gap)


def initial_strategies(profile: AnyProfile) -> list[Strategy]:
    """The benchmarks known before any has run (a sweep adds its rates after the first two)."""
    if isinstance(profile, SynchronousProfileConfig):
        return [Strategy("synchronous", max_concurrency=1)]
    if isinstance(profile, ConcurrentProfileConfig):
        return [Strategy("concurrent", max_concurrency=profile.streams)]
    if isinstance(profile, ThroughputProfileConfig):
        return [Strategy("throughput", max_concurrency=profile.max_concurrency)]
    if isinstance(profile, ConstantProfileConfig):
        return [Strategy("constant", max_concurrency=profile.max_concurrency, rate=profile.rate)]
    if isinstance(profile, PoissonProfileConfig):
        return [Strategy("poisson", max_concurrency=profile.max_concurrency, rate=profile.rate, seed=profile.seed)]
    return [
        Strategy("synchronous", max_concurrency=1),
        Strategy("throughput", max_concurrency=profile.max_concurrency),
    ]


def sweep_rates(profile: SweepProfileConfig, synchronous_rate: float, throughput_rate: float) -> list[Strategy]:
    """``sweep_size - 2`` rates spread evenly strictly between the synchronous and throughput request rates."""
    count = profile.sweep_size - 2
    if count <= 0:
        return []
    low, high = sorted((synchronous_rate, throughput_rate))
    rates = np.linspace(low, high, count + 2)[1:-1]
    return [
        Strategy(profile.strategy, max_concurrency=profile.max_concurrency, rate=float(rate), seed=profile.seed)
        for rate in rates
        if rate > 0
    ]
