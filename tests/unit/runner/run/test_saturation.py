"""The over-saturation detector on queues whose truth is known: a stable one is never stopped, an overloaded one is
stopped soon after its window has passed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.config.run import RunConfig
from batchmark.runner.results.report import BenchmarkResult
from batchmark.runner.run.benchmark import BenchmarkRunner
from batchmark.runner.run.profiles import Strategy
from batchmark.runner.run.saturation import SaturationDetector
from tests.unit.observability_data import batch, benchmark

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


def test_a_sweep_stops_at_the_first_rate_found_saturated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's rates rise: once one over-saturates the engine, the higher ones would too, and are not run (its
    repeats run the same, shorter, list)."""
    config = RunConfig.model_validate(
        {
            "backend": {"model": "m", "engine": "simulated"},
            "data": {"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 8},
            "profile": {"kind": "sweep", "sweep_size": 8},
            "constraints": [{"kind": "max_requests", "count": 10}, {"kind": "over_saturation"}],
        }
    )
    runner = BenchmarkRunner(config)
    measured = benchmark([batch(0, 0, 4, 0.2)])
    ran: list[Strategy] = []

    def run_one(strategy: Strategy, drain_after: bool, point: int, backend: BackendConfig) -> BenchmarkResult:
        """Synchronous at 2 requests/s, throughput at 20; the engine keeps up with rates up to 10/s."""
        ran.append(strategy)
        rate = {"synchronous": 2.0, "throughput": 20.0}.get(strategy.kind, strategy.rate or 0.0)
        stop = "over_saturation" if strategy.rate is not None and strategy.rate > 10 else "max_requests"
        throughput = measured.throughput.model_copy(update={"requests_per_second": rate})
        return measured.model_copy(update={"strategy": strategy.label, "stop_reason": stop, "throughput": throughput})

    monkeypatch.setattr(runner, "_run_one", run_one)
    results: list[BenchmarkResult] = []
    runner._run_point(0, runner._backends[0], results, repeat=0, visits_left=0)
    rates = [strategy.rate for strategy in ran if strategy.rate is not None]
    # Six rates spread between 2 and 20 (4.6, 7.1, 9.7, 12.3, 14.9, 17.4): the sweep stops after 12.3.
    assert rates == pytest.approx([2 + 18 * step / 7 for step in range(1, 5)])
    assert [result.stop_reason for result in results][-1] == "over_saturation"
    assert len(runner._strategies[0]) == len(ran) == 6


def test_scipy_is_imported_only_for_a_benchmark_that_watches_for_saturation() -> None:
    # SciPy takes seconds and tens of MB to import; the run's modules are imported by every run and by the operator.
    code = "import sys, batchmark.runner.commands.run, batchmark.runner.run.saturation; print('scipy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout == "False\n"
