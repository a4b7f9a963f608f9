"""Results for the observability unit tests, folded by the real Aggregator from batches built here."""

from __future__ import annotations

from batchmark.runner.config.run import RunConfig
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import NO_TIMINGS, Completion
from batchmark.runner.results.repeats import repeated_benchmarks
from batchmark.runner.results.report import BenchmarkResult, EngineSummary, RunReport, SweepSummary
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy

CONFIG = RunConfig.model_validate(
    {
        "name": "unit",
        "backend": {"model": "tiny/model", "batch_size": 4, "engine": "simulated"},
        "data": {"prompt_tokens": 16, "output_tokens": 8},
        "profile": {"kind": "throughput", "max_concurrency": 8},
        "constraints": [{"kind": "max_requests", "count": 12}],
    }
)


def batch(
    batch_id: int, first_id: int, size: int, at: float, errors: int = 0, enqueued_at: float | None = None
) -> BatchEvent:
    """A finished batch of ``size`` requests, the last ``errors`` of them failed, enqueued at ``enqueued_at``."""
    completions = [
        Completion(first_id + i, 16, 0 if i >= size - errors else 8, "boom" if i >= size - errors else None, NO_TIMINGS)
        for i in range(size)
    ]
    report = BatchReport(
        batch_id=batch_id,
        full=size == 4,
        closed_at=at,
        started_at=at + 0.01,
        finished_at=at + 0.5,
        completions=completions,
        queue_depth=2,
    )
    enqueued = at - 0.1 if enqueued_at is None else enqueued_at
    return BatchEvent(report=report, enqueued=[enqueued] * size, measured=[True] * size)


def benchmark(
    events: list[BatchEvent], label_rate: float | None = None, started_wall: float = 1000.0
) -> BenchmarkResult:
    aggregator = Aggregator(0.0, started_wall, 0, Window(), sample_requests=5)
    for event in events:
        aggregator.on_batch(event)
    strategy = Strategy("constant", rate=label_rate) if label_rate else Strategy("throughput", max_concurrency=8)
    return aggregator.finish(end=3.0, stop_reason="max_requests", incomplete=0, interrupted=False, strategy=strategy)


def report(benchmarks: list[BenchmarkResult], run_id: str = "abc123", model: str = "tiny/model") -> RunReport:
    return RunReport(
        name="unit",
        run_id=run_id,
        batchmark_version="0.0.test",
        created_at="2026-01-01T00:00:00+00:00",
        engine=EngineSummary(
            kind="simulated",
            simulated=True,
            model=model,
            version=None,
            gpu_name="simulated GPU",
            load_seconds=0.5,
            details={},
        ),
        environment={},
        config=CONFIG.model_dump(mode="json"),
        complete=True,
        benchmarks=benchmarks,
    )


def simple_report(run_id: str = "abc123", model: str = "tiny/model") -> RunReport:
    return report([benchmark([batch(0, 0, 4, 0.2), batch(1, 4, 4, 0.9), batch(2, 8, 2, 1.6)])], run_id, model)


def sweep_report() -> RunReport:
    return report(
        [
            benchmark([batch(0, 0, 4, 0.2), batch(1, 4, 4, 0.9)]),
            benchmark([batch(2, 8, 2, 0.2), batch(3, 10, 3, 0.9)], label_rate=5.0, started_wall=1003.0),
            benchmark([batch(4, 13, 4, 0.2), batch(5, 17, 1, 0.9, errors=1)], label_rate=9.0, started_wall=1006.0),
        ]
    )


SWEPT_BATCH_SIZES = (8, 16, 32, 64, 128)
# The order a repeated sweep runs its points in: each repeat's points shuffled, as the runner does.
REPEATED_RUN_ORDER: tuple[tuple[int, int], ...] = (
    *((0, 0), (1, 0), (2, 0), (3, 0), (4, 0)),
    *((3, 1), (1, 1), (2, 1), (4, 1), (0, 1)),
    *((3, 2), (2, 2), (0, 2), (4, 2), (1, 2)),
)


def repeated_sweep_report() -> RunReport:
    """A sweep of five batch sizes, three repeats each, in the shuffled order the runner runs them in."""
    results: list[BenchmarkResult] = []
    for point, repeat in REPEATED_RUN_ORDER:
        size = SWEPT_BATCH_SIZES[point]
        events = [batch(index, index * 4, 4, 0.2 + index * 0.3) for index in range(2 + repeat)]
        result = benchmark(events, started_wall=1000.0 + len(results) * 3)
        results.append(
            result.model_copy(
                update={"swept": {"batch_size": size}, "batch_size": size, "point": point, "repeat": repeat}
            )
        )
    sweep = SweepSummary(
        fields=["batch_size"], points=5, engine_loads=[], wall_seconds=45.0, timed_seconds=45.0, load_seconds=0.0
    )
    config = {**CONFIG.model_dump(mode="json"), "repeats": 3}
    return report(results).model_copy(
        update={"sweep": sweep, "repeats": 3, "repeated": repeated_benchmarks(results, {}), "config": config}
    )
