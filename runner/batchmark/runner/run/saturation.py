"""Over-saturation: a rate the engine cannot keep up with, told by a trend test rather than a fixed threshold.

At a rate the engine serves, requests in flight and their latency hover around a level; above what it can serve,
both grow for as long as requests keep coming, since each second adds more than it finishes. The detector watches
the last ``window`` seconds cut into ``segments`` equal parts: the mean count of requests in flight in each part
(sampled as the run loop turns) and the median latency (issue to completion) of the requests that finished in it.
Segment means rather than the raw samples: a queue's samples are strongly correlated from one moment to the next,
which makes any test on them far too eager, while the means of consecutive segments of a stable queue are close
to independent (the batch-means method). Both series are tested for an upward trend with Kendall's tau (one
sided). With 6 segments the smallest p-value is 1/720, a strictly rising sequence, so the default 0.005 asks for
exactly that. A check runs once per segment length, from ``window`` seconds into the benchmark on, and the engine
is saturated when ``checks`` checks in a row (3 by default) found both trends significant at ``significance``:
a stable queue near its capacity wanders up for a while now and then, an overloaded one keeps rising.

Measured on a one-server queue (tests/unit/runner/run/test_saturation.py, the defaults, 180 s runs of 40 seeds
each): no run stopped at 50, 80 or 90 % load, one of 40 at 95 % (such a queue takes minutes to settle from
empty); at 130 % every run stopped within 90 s, at 200 % within 40 s, and at 110 % about half within 180 s.
GuideLLM's ``--detect-saturation`` is the anchor (it fits slopes of concurrency and TTFT).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

# The stop reason of a benchmark the detector ended (the constraint's kind, as every constraint's stop reason is).
OVER_SATURATION = "over_saturation"


class SaturationVerdict(NamedTuple):
    """The trend test's figures at the check that found the engine saturated (or the last one)."""

    in_flight_tau: float
    in_flight_p: float
    latency_tau: float
    latency_p: float
    in_flight_first: float  # mean requests in flight in the window's first segment
    in_flight_last: float  # and in its last


def import_trend_test() -> Callable[..., Any]:
    """SciPy's Kendall tau test. scipy.stats takes seconds to import: a benchmark that watches for saturation
    imports it as it is set up, before its clock starts; other processes that import the run's modules (the
    operator does) never do."""
    from scipy import stats  # noqa: PLC0415 - see above

    kendalltau: Callable[..., Any] = stats.kendalltau
    return kendalltau


class SaturationDetector:
    """Fed the run loop's samples; ``saturated`` checks at most once per segment, and says so once ``checks``
    checks in a row have found both trends rising."""

    def __init__(self, start: float, window: float, segments: int, significance: float, checks: int) -> None:
        self._kendalltau = import_trend_test()
        self.window = window
        self.segments = segments
        self.significance = significance
        self.checks = checks
        self._rising_checks = 0  # consecutive checks that found both trends rising
        self._segment = window / segments
        self._next_check = start + window
        self._in_flight: deque[tuple[float, float]] = deque()
        self._latency: deque[tuple[float, float]] = deque()
        self.verdict: SaturationVerdict | None = None

    def in_flight(self, now: float, count: int) -> None:
        self._in_flight.append((now, count))

    def finished(self, now: float, latency: float) -> None:
        self._latency.append((now, latency))

    def saturated(self, now: float) -> bool:
        if now < self._next_check:
            return False
        self._next_check = now + self._segment
        begin = now - self.window
        for samples in (self._in_flight, self._latency):
            while samples and samples[0][0] < begin:
                samples.popleft()
        in_flight = self._segment_values(self._in_flight, begin, statistics.fmean)
        latency = self._segment_values(self._latency, begin, statistics.median)
        if in_flight is None or latency is None:
            self._rising_checks = 0
            return False  # a segment without samples: too little to judge
        in_flight_tau, in_flight_p = self._rising(in_flight)
        latency_tau, latency_p = self._rising(latency)
        self.verdict = SaturationVerdict(
            in_flight_tau, in_flight_p, latency_tau, latency_p, in_flight[0], in_flight[-1]
        )
        rising = in_flight_p < self.significance and latency_p < self.significance
        self._rising_checks = self._rising_checks + 1 if rising else 0
        return self._rising_checks >= self.checks

    def _rising(self, values: list[float]) -> tuple[float, float]:
        """Kendall's tau of the values against their order, and its one-sided p-value for a rising trend."""
        result = self._kendalltau(range(len(values)), values, alternative="greater")
        tau, p = float(result.statistic), float(result.pvalue)
        return (0.0, 1.0) if math.isnan(tau) else (tau, p)

    def _segment_values(
        self, samples: Iterable[tuple[float, float]], begin: float, summary: Callable[[list[float]], float]
    ) -> list[float] | None:
        """Each segment's summary of its samples; None where a segment has none."""
        buckets: list[list[float]] = [[] for _ in range(self.segments)]
        for when, value in samples:
            index = min(int((when - begin) / self._segment), self.segments - 1)
            buckets[index].append(float(value))
        if any(not bucket for bucket in buckets):
            return None
        return [summary(bucket) for bucket in buckets]
