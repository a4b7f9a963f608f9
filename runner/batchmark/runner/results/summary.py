"""A compact summary of a run, made from its full report: what a BatchBenchmark's status and the pod's
termination message carry (their models: batchmark.runner.statusfields).

The full report (samples, CDF points, timelines) is far too large for a resource's status (a 10-point sweep is
~700 KB); this keeps one small entry per benchmark with its headline figures, in camelCase as Kubernetes
writes field names. The termination message is capped at 4 KiB by the kubelet: ``termination_message``
drops fields, then benchmarks, until the JSON fits, so it is always whole, parseable JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchmark.runner.results.report import BenchmarkResult, EngineSummary, RegressionReport, RunReport
from batchmark.runner.statusfields import (
    BenchmarkSummary,
    EngineStatus,
    Interval,
    RegressionStatus,
    RequestTotals,
    RunSummary,
)

TERMINATION_MESSAGE_LIMIT = 4096
STOP_REASON_LIMIT = 1024  # a run's stop reason may carry an engine's error; it must leave room for the rest
OUTPUT_FAILURE_LIMIT = 1024  # likewise what could not be written after the run (a store's error)


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


def engine_status(engine: EngineSummary) -> EngineStatus:
    return EngineStatus(
        kind=engine.kind,
        simulated=engine.simulated,
        model=engine.model,
        version=engine.version,
        gpu_name=engine.gpu_name,
        load_seconds=_round(engine.load_seconds, 4),
    )


def benchmark_summary(result: BenchmarkResult, repeated: bool = False) -> BenchmarkSummary:
    distributions = result.distributions
    return BenchmarkSummary(
        strategy=result.strategy,
        stop_reason=result.stop_reason,
        requests=RequestTotals(
            completed=result.requests.completed,
            errored=result.requests.errored,
            incomplete=result.requests.incomplete,
        ),
        requests_per_second=_round(result.throughput.requests_per_second),
        output_tokens_per_second=_round(result.throughput.output_tokens_per_second),
        prompt_tokens_per_second=_round(result.throughput.prompt_tokens_per_second),
        total_tokens_per_second=_round(result.throughput.total_tokens_per_second),
        latency_p50_seconds=_round(distributions.request_latency.median),
        latency_p90_seconds=_round(distributions.request_latency.p90),
        latency_p99_seconds=_round(distributions.request_latency.p99),
        ttft_p50_seconds=_round(distributions.time_to_first_token.median),
        ttft_p99_seconds=_round(distributions.time_to_first_token.p99),
        tpot_p50_seconds=_round(distributions.time_per_output_token.median),
        itl_p50_seconds=_round(distributions.inter_token_latency.median),
        itl_p99_seconds=_round(distributions.inter_token_latency.p99),
        mean_batch_size=_round(distributions.batch_size.mean),
        engine_utilization=_round(result.engine_utilization),
        replicas=result.replica_summary.count if result.replica_summary is not None else None,
        straggler_ratio=_round(result.replica_summary.straggler_ratio) if result.replica_summary is not None else None,
        swept=dict(result.swept) or None,
        batch_size=result.batch_size,
        repeat=result.repeat if repeated else None,
        slo_met=result.slo.met if result.slo is not None else None,
        goodput_requests_per_second=_round(result.slo.goodput.requests_per_second) if result.slo else None,
        goodput_output_tokens_per_second=_round(result.slo.goodput.output_tokens_per_second) if result.slo else None,
        cost_per_million_output_tokens=_round(result.cost.per_million_output_tokens) if result.cost else None,
        cost_per_million_total_tokens=_round(result.cost.per_million_total_tokens) if result.cost else None,
    )


def run_summary(report: RunReport) -> RunSummary:
    return RunSummary(
        run_id=report.run_id,
        complete=report.complete,
        stop_reason=report.stop_reason[:STOP_REASON_LIMIT] if report.stop_reason is not None else None,
        engine=engine_status(report.engine),
        results=[benchmark_summary(result, report.repeats > 1) for result in report.benchmarks],
        recommended=report.recommendation.benchmark if report.recommendation is not None else None,
        recommendation=report.recommendation.statement if report.recommendation is not None else None,
        recommended_output_tokens_per_second=_recommended_interval(report),
        certainty=report.recommendation.certainty if report.recommendation is not None else None,
    )


def _recommended_interval(report: RunReport) -> Interval | None:
    chosen = report.recommendation
    if chosen is None or chosen.repeated is None or not report.repeated:
        return None
    figure = report.repeated[chosen.repeated].output_tokens_per_second
    mean = _round(figure.mean)
    assert mean is not None
    return Interval(mean=mean, low=_round(figure.low), high=_round(figure.high), repeats=figure.count)


# What survives as the message must shrink, most useful last: each level keeps fewer figures per benchmark.
_DEGRADED_FIELDS: tuple[frozenset[str], ...] = (
    frozenset(BenchmarkSummary.model_fields),
    frozenset(
        {
            "strategy",
            "stop_reason",
            "requests",
            "requests_per_second",
            "output_tokens_per_second",
            "total_tokens_per_second",
            "latency_p50_seconds",
            "latency_p99_seconds",
            "ttft_p99_seconds",
            "engine_utilization",
            "swept",
            "repeat",
            "slo_met",
            "goodput_output_tokens_per_second",
            "cost_per_million_output_tokens",
        }
    ),
    frozenset(
        {
            "strategy",
            "swept",
            "repeat",
            "slo_met",
            "requests_per_second",
            "output_tokens_per_second",
            "latency_p50_seconds",
        }
    ),
    # The repeat stays to the last: without it two repeats of a point are one series in the operator's metrics.
    frozenset({"strategy", "swept", "repeat", "output_tokens_per_second"}),
)


def summary_json(summary: RunSummary) -> str:
    """Compact JSON, camelCase, without the figures left out."""
    return summary.model_dump_json(by_alias=True, exclude_none=True)


def fit_summary(summary: RunSummary, limit: int = TERMINATION_MESSAGE_LIMIT) -> RunSummary:
    """The most complete summary whose JSON is at most ``limit`` bytes: fewer fields, then fewer benchmarks.

    Benchmarks are dropped from the middle of a sweep first: its synchronous and throughput ends bound the
    rest. The engine goes last but one; a summary of no benchmark always fits.
    """
    for engine in (summary.engine, None):
        for fields in _DEGRADED_FIELDS:
            reduced = [_keep(result, fields) for result in summary.results]
            for kept in _shrinking(reduced):
                candidate = summary.model_copy(
                    update={
                        "engine": engine,
                        "results": kept,
                        "omitted_benchmarks": summary.omitted_benchmarks + len(reduced) - len(kept),
                    }
                )
                if len(summary_json(candidate).encode()) <= limit:
                    return candidate
                if fields is not _DEGRADED_FIELDS[-1]:
                    break  # fewer fields first; benchmarks go only once the fields are down to the minimum
    return summary.model_copy(update={"engine": None, "results": [], "omitted_benchmarks": len(summary.results)})


def termination_message(
    report: RunReport, limit: int = TERMINATION_MESSAGE_LIMIT, output_failure: str | None = None
) -> str:
    """The run's summary as JSON of at most ``limit`` bytes, for the container's termination message, with what
    could not be written after the run (``output_failure``) where something could not."""
    summary = run_summary(report)
    if output_failure is not None:
        summary = summary.model_copy(update={"output_failure": output_failure[:OUTPUT_FAILURE_LIMIT]})
    return summary_json(fit_summary(summary, limit))


def _keep(result: BenchmarkSummary, fields: frozenset[str]) -> BenchmarkSummary:
    return BenchmarkSummary.model_validate(
        {name: getattr(result, name) for name in fields if getattr(result, name) is not None}
    )


def _shrinking(results: Sequence[BenchmarkSummary]) -> list[list[BenchmarkSummary]]:
    """All of them, then one fewer at a time, removed from the middle outwards."""
    kept = list(results)
    versions = [list(kept)]
    while kept:
        kept.pop(len(kept) // 2 if len(kept) > 2 else len(kept) - 1)
        versions.append(list(kept))
    return versions


def regression_status(regression: RegressionReport) -> RegressionStatus:
    """The verdict for the status: the benchmark that fell most, with its interval and test."""
    worst = min(regression.benchmarks, key=lambda entry: entry.change, default=None)
    return RegressionStatus(
        verdict=regression.verdict.value,
        baseline=regression.baseline,
        change=worst.change if worst is not None else None,
        change_low=worst.change_low if worst is not None else None,
        change_high=worst.change_high if worst is not None else None,
        p_value=worst.p_value if worst is not None else None,
        threshold=regression.threshold,
        reason=regression.reason,
    )
