"""The over-saturation detector on queues whose truth is known: a stable one is never stopped, an overloaded one is
stopped soon after its window has passed."""

from __future__ import annotations

import numpy as np
import pytest

from batchmark.runner.run.saturation import SaturationDetector

WINDOW, SEGMENTS, SIGNIFICANCE, CHECKS = 30.0, 6, 0.005, 3
TICK = 0.25  # how often the run loop samples requests in flight when nothing else wakes it


def queue(rate: float, service_rate: float, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and departure times of a one-server FIFO queue (Poisson arrivals, exponential service)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, size=int(rate * seconds * 1.5) + 10))
    arrivals = arrivals[arrivals < seconds]
    services = rng.exponential(1 / service_rate, size=len(arrivals))
    departures = np.empty_like(arrivals)
    free_at = 0.0
    for index, (arrived, service) in enumerate(zip(arrivals, services, strict=True)):
        free_at = max(arrived, free_at) + service
        departures[index] = free_at
    return arrivals, departures


def first_stop(rate: float, service_rate: float, seconds: float, seed: int) -> float | None:
    """When the detector, fed as the run loop feeds it, first says saturated; None if never."""
    arrivals, departures = queue(rate, service_rate, seconds, seed)
    detector = SaturationDetector(0.0, WINDOW, SEGMENTS, SIGNIFICANCE, CHECKS)
    finished = 0
    for now in np.arange(TICK, seconds, TICK):
        while finished < len(departures) and departures[finished] <= now:
            detector.finished(float(departures[finished]), float(departures[finished] - arrivals[finished]))
            finished += 1
        issued = int(np.searchsorted(arrivals, now, side="right"))
        detector.in_flight(float(now), issued - finished)
        if detector.saturated(float(now)):
            return float(now)
    return None


@pytest.mark.parametrize("load", [0.5, 0.8, 0.9])
def test_a_rate_the_engine_keeps_up_with_is_never_stopped(load: float) -> None:
    """Forty seeded runs of three minutes each (31 checks each) at a load the queue serves: not one stop."""
    stops = [first_stop(load * 10, 10, 180, seed) for seed in range(40)]
    assert stops == [None] * 40


@pytest.mark.parametrize(("load", "bound"), [(1.3, 120.0), (2.0, WINDOW + (CHECKS + 2) * WINDOW / SEGMENTS)])
def test_a_rate_above_capacity_is_stopped_within_a_bound(load: float, bound: float) -> None:
    stops = [first_stop(load * 10, 10, 180, seed) for seed in range(20)]
    assert all(stop is not None for stop in stops), stops
    # No verdict before the window and its checks in a row have passed; a clear overload is seen soon after.
    assert min(stop for stop in stops if stop is not None) >= WINDOW + (CHECKS - 1) * WINDOW / SEGMENTS
    assert max(stop for stop in stops if stop is not None) <= bound


def test_no_verdict_before_the_window_has_passed_or_with_an_empty_segment() -> None:
    detector = SaturationDetector(0.0, WINDOW, SEGMENTS, SIGNIFICANCE, CHECKS)
    for second in range(29):
        detector.in_flight(float(second), second * 10)
        detector.finished(float(second), float(second))
        assert not detector.saturated(float(second))
    detector = SaturationDetector(0.0, WINDOW, SEGMENTS, SIGNIFICANCE, CHECKS)
    for second in range(40):
        detector.in_flight(float(second), second * 10)  # rising, but no request finished
    assert not detector.saturated(40.0)
    assert detector.verdict is None
