"""The aggregator's memory stays bounded however long the run, and its windows follow the constraints."""

import pytest

from batchmark.runner.config.profiles import TransientPhaseConfig
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import NO_TIMINGS, Completion
from batchmark.runner.run.aggregator import TIMELINE_BUCKETS, Aggregator, Timeline, Window
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy


def test_timeline_coarsens_instead_of_growing() -> None:
    timeline = Timeline(start=0.0)
    for second in range(10_000):  # almost three hours of one completion a second
        timeline.add_completions(second + 0.5, completed=1, errored=0, output_tokens=10)
        timeline.add_busy(second, second + 0.5)
    points = timeline.points()
    assert len(points) <= TIMELINE_BUCKETS
    assert sum(point.completed for point in points) == 10_000
    assert sum(point.output_tokens for point in points) == 100_000
    assert sum(point.engine_busy for point in points) == pytest.approx(5_000)


def batch(batch_id: int, first: int, size: int, started: float, finished: float) -> BatchEvent:
    completions = [Completion(first + i, 16, 8, None, NO_TIMINGS) for i in range(size)]
    report = BatchReport(batch_id, True, started, started, finished, completions, 0)
    return BatchEvent(report=report, enqueued=[started] * size, measured=[True] * size)


def test_samples_and_distributions_stay_bounded() -> None:
    aggregator = Aggregator(start=0.0, started_wall=0.0, first_id=0, window=Window(), sample_requests=5)
    for index in range(2_000):
        aggregator.on_batch(batch(index, index * 64, 64, index * 0.01, index * 0.01 + 0.01))
    result = aggregator.finish(
        end=20.0, stop_reason="max_requests", incomplete=0, interrupted=False, strategy=Strategy("throughput")
    )
    assert result.requests.completed == 128_000
    assert len(result.samples) == 5
    assert not result.distributions.request_latency.exact  # past the exact limit: a t-digest, not every value
    assert result.engine_utilization == 1.0
    assert result.throughput.output_tokens_per_second == pytest.approx(128_000 * 8 / 20.0)


def test_bare_numbers_mean_seconds_with_a_duration_else_requests() -> None:
    phase = TransientPhaseConfig.model_validate(0.1)
    assert Window.resolve(phase, None, max_requests=None, max_seconds=30).warmup_seconds == 3.0
    assert Window.resolve(phase, None, max_requests=200, max_seconds=None).warmup_requests == 20
    cooldown = TransientPhaseConfig.model_validate(5)
    window = Window.resolve(None, cooldown, max_requests=None, max_seconds=60)
    assert window.cooldown_seconds == 5.0
    assert not window.measured(index=0, enqueued=1.0, completed=56.0, start=0.0)
    assert window.measured(index=0, enqueued=1.0, completed=54.0, start=0.0)


def timed_batch(batch_id: int, first: int, size: int, started: float, engine: float, overhead: float) -> BatchEvent:
    """A batch whose engine call took ``engine`` seconds of the ``engine + overhead`` the dispatcher spent."""
    completions = [Completion(first + i, 16, 8, None, NO_TIMINGS) for i in range(size)]
    report = BatchReport(
        batch_id,
        True,
        started,
        started,
        started + engine + overhead,
        completions,
        0,
        engine_seconds=engine,
        overhead_seconds=overhead,
        steps=9,
        harness_cpu=0.002 * (batch_id + 1),
    )
    return BatchEvent(report=report, enqueued=[started] * size, measured=[True] * size)


def test_utilisation_counts_only_the_engine_calls_and_overhead_is_a_distribution() -> None:
    aggregator = Aggregator(
        start=0.0, started_wall=0.0, first_id=0, window=Window(), sample_requests=0, worker_cpu_start=[0.001]
    )
    # Ten batches back to back, each 90 ms in generate() and 10 ms of the harness's own work.
    for index in range(10):
        aggregator.on_batch(timed_batch(index, index * 4, 4, index * 0.1, engine=0.09, overhead=0.01))
    result = aggregator.finish(
        end=1.0, stop_reason="max_requests", incomplete=0, interrupted=False, strategy=Strategy("throughput")
    )
    assert result.measured_duration == pytest.approx(1.0)
    assert result.engine_utilization == pytest.approx(0.9)
    overhead = result.distributions.dispatch_overhead
    assert overhead.count == 10
    assert overhead.mean == pytest.approx(0.01)
    assert result.engine_steps == 90
    assert result.engine_steps_per_1000_requests == pytest.approx(1000 * 90 / 40)
    # The worker's share is what its reports say it spent since the benchmark began (0.020 - 0.001 s), plus
    # this process's own CPU, which is never negative.
    assert result.harness_cpu_seconds is not None
    assert result.harness_cpu_seconds >= 0.019
    assert result.harness_cpu_per_request == pytest.approx(result.harness_cpu_seconds / 40)
    assert sum(point.engine_busy for point in result.timeline) == pytest.approx(0.9)


def test_results_written_before_these_figures_still_load() -> None:
    result = Aggregator(start=0.0, started_wall=0.0, first_id=0, window=Window(), sample_requests=0).finish(
        end=1.0, stop_reason="max_requests", incomplete=0, interrupted=False, strategy=Strategy("throughput")
    )
    old = result.model_dump(mode="json")
    for key in ("engine_steps", "engine_steps_per_1000_requests", "harness_cpu_seconds", "harness_cpu_per_request"):
        del old[key]
    del old["distributions"]["dispatch_overhead"]
    loaded = type(result).model_validate(old)
    assert loaded.engine_steps == 0
    assert loaded.distributions.dispatch_overhead.count == 0
