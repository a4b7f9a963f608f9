"""A compact summary of a run: what a BatchBenchmark's status and the pod's termination message carry.

The full report (samples, CDF points, timelines) is far too large for a resource's status (a 10-point sweep is
~700 KB); this keeps one small entry per benchmark with its headline figures, in camelCase as Kubernetes
writes field names. The termination message is capped at 4 KiB by the kubelet: ``termination_message``
drops fields, then benchmarks, until the JSON fits, so it is always whole, parseable JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from batchmark.runner.results.report import BenchmarkResult, EngineSummary, RunReport

TERMINATION_MESSAGE_LIMIT = 4096
STOP_REASON_LIMIT = 1024  # a run's stop reason may carry an engine's error; it must leave room for the rest


class SummaryModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, frozen=True
    )


class RequestTotals(SummaryModel):
    """Request counts of one benchmark."""

    completed: int = Field(description="Requests that finished successfully inside the measured window.")
    errored: int = Field(description="Requests that failed inside the measured window.")
    incomplete: int = Field(default=0, description="Requests still in flight when the benchmark stopped.")


class BenchmarkSummary(SummaryModel):
    """One benchmark's headline figures; every figure but the strategy may be left out to save space."""

    strategy: str = Field(description="Strategy label, e.g. throughput x512 or constant@5/s.")
    stop_reason: str | None = Field(default=None, description="Which constraint (or signal) ended the benchmark.")
    requests: RequestTotals | None = Field(default=None, description="Request counts.")
    requests_per_second: float | None = Field(default=None, description="Completed requests per second.")
    output_tokens_per_second: float | None = Field(default=None, description="Generated tokens per second.")
    prompt_tokens_per_second: float | None = Field(default=None, description="Prompt tokens per second.")
    total_tokens_per_second: float | None = Field(default=None, description="Prompt and generated tokens per second.")
    latency_p50_seconds: float | None = Field(default=None, description="Median request latency, seconds.")
    latency_p90_seconds: float | None = Field(default=None, description="90th percentile request latency, seconds.")
    latency_p99_seconds: float | None = Field(default=None, description="99th percentile request latency, seconds.")
    ttft_p50_seconds: float | None = Field(default=None, description="Median time to first token, seconds.")
    ttft_p99_seconds: float | None = Field(default=None, description="99th percentile time to first token, seconds.")
    tpot_p50_seconds: float | None = Field(default=None, description="Median time per output token, seconds.")
    mean_batch_size: float | None = Field(default=None, description="Mean effective batch size.")
    engine_utilization: float | None = Field(
        default=None, description="Share of the measured window the engine was busy, 0 to 1."
    )
    swept: dict[str, Any] | None = Field(
        default=None, description="Values of the swept backend fields this benchmark ran with (a sweep only)."
    )
    batch_size: int | None = Field(default=None, description="The backend's batch_size for this benchmark.")
    repeat: int | None = Field(default=None, description="With repeats: which repeat of its point this is, from 0.")
    slo_met: bool | None = Field(default=None, description="Whether it met every target of the latency budget.")
    goodput_requests_per_second: float | None = Field(
        default=None, description="Requests per second that met every per-request target of the budget."
    )
    goodput_output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second of the requests that met every per-request target."
    )
    cost_per_million_output_tokens: float | None = Field(
        default=None, description="Cost of a million generated tokens at the given GPU price."
    )
    cost_per_million_total_tokens: float | None = Field(
        default=None, description="Cost of a million prompt and generated tokens at the given GPU price."
    )


class EngineStatus(SummaryModel):
    """The engine that ran."""

    kind: str = Field(description="vllm or simulated.")
    simulated: bool = Field(description="True when timings come from the simulated engine's model, not a GPU.")
    model: str = Field(description="Model loaded.")
    version: str | None = Field(default=None, description="vLLM version, where vLLM ran.")
    gpu_name: str | None = Field(default=None, description="Device name (the modelled one when simulated).")
    load_seconds: float | None = Field(default=None, description="Engine load time, outside every timed phase.")


class Interval(SummaryModel):
    """A figure over repeats: mean and its 95% confidence interval."""

    mean: float = Field(description="Mean over the repeats.")
    low: float | None = Field(default=None, description="Lower end of the 95% confidence interval.")
    high: float | None = Field(default=None, description="Upper end of the 95% confidence interval.")
    repeats: int = Field(description="Repeats it is computed from.")


class RunSummary(SummaryModel):
    """What the runner leaves in its termination message: enough to fill the status without the API server."""

    run_id: str = Field(description="Unique id of the run.")
    complete: bool = Field(description="False when the run was interrupted before its end.")
    stop_reason: str | None = Field(
        default=None,
        description="Why an interrupted run ended (the engine failed, a signal); none when it completed.",
    )
    engine: EngineStatus | None = Field(default=None, description="The engine that ran.")
    results: list[BenchmarkSummary] = Field(description="One entry per benchmark, in run order.")
    omitted_benchmarks: int = Field(
        default=0, description="Benchmarks left out to fit the termination message (the results ConfigMap has all)."
    )
    recommended: int | None = Field(
        default=None,
        description="Index in the full report of the recommended benchmark (highest output tokens/s within budget).",
    )
    recommendation: str | None = Field(default=None, description="The recommendation, or why there is none.")
    recommended_output_tokens_per_second: Interval | None = Field(
        default=None, description="With repeats: the recommended benchmark's output tokens/s over its repeats."
    )
    certainty: str | None = Field(
        default=None, description="With repeats: distinguishable, tied or unknown against the runner-up."
    )


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
        mean_batch_size=_round(distributions.batch_size.mean),
        engine_utilization=_round(result.engine_utilization),
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


def termination_message(report: RunReport, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """The run's summary as JSON of at most ``limit`` bytes, for the container's termination message."""
    return summary_json(fit_summary(run_summary(report), limit))


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


def parse_summary(text: str) -> RunSummary | None:
    """A termination message read back, or None when it is not a summary (e.g. the log tail of a crash)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    try:
        return RunSummary.model_validate(data)
    except ValueError:
        return None


class ProgressStatus(SummaryModel):
    """The run in progress, as the runner last reported it (a few seconds apart)."""

    pod_name: str | None = Field(default=None, description="The pod reporting: its engine is loaded.")
    benchmark: int = Field(default=0, description="Which benchmark of the run is going, from 1 (0: none yet).")
    benchmarks: int = Field(default=0, description="Benchmarks known so far (a sweep adds rates after the second).")
    strategy: str | None = Field(default=None, description="The current benchmark's strategy label.")
    requests_completed: int = Field(default=0, description="Requests of the current benchmark completed so far.")
    requests_errored: int = Field(default=0, description="Requests of the current benchmark failed so far.")
    elapsed_seconds: float = Field(default=0.0, description="Seconds since the current benchmark started.")
    output_tokens_per_second: float = Field(
        default=0.0, description="Output tokens per second so far in the current benchmark."
    )


class Headline(SummaryModel):
    """The figures kubectl get shows: the run's recommended benchmark, or the one with the highest output
    throughput when the run recommends none."""

    strategy: str = Field(description="Which benchmark of the run.")
    batch_size: int | None = Field(
        default=None, description="The micro-batch size it ran with (differs per sweep point)."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Generated tokens per second (with repeats: the mean over them)."
    )
    output_tokens_per_second_low: float | None = Field(
        default=None, description="With repeats: lower end of the output tokens/s 95% confidence interval."
    )
    output_tokens_per_second_high: float | None = Field(
        default=None, description="With repeats: upper end of the output tokens/s 95% confidence interval."
    )
    repeats: int | None = Field(default=None, description="With repeats: how many the figures come from.")
    certainty: str | None = Field(
        default=None, description="With repeats: distinguishable, tied or unknown against the runner-up."
    )
    requests_per_second: float | None = Field(default=None, description="Completed requests per second.")
    latency_p50_seconds: float | None = Field(default=None, description="Median request latency, seconds.")
    latency_p99_seconds: float | None = Field(default=None, description="99th percentile request latency, seconds.")


def headline(summary: RunSummary) -> Headline | None:
    """The recommended benchmark (under the latency budget, when the run has one), else the one with the highest
    output throughput; None for a run of no benchmark."""
    results = summary.results
    if not results:
        return None
    # The index is into the full report: it names an entry here only when none was left out to fit.
    recommended = summary.recommended
    if recommended is not None and summary.omitted_benchmarks == 0 and 0 <= recommended < len(results):
        best = results[recommended]
    else:
        best = max(results, key=lambda result: result.output_tokens_per_second or 0.0)
    shown = recommended is not None and summary.omitted_benchmarks == 0 and 0 <= recommended < len(results)
    interval = summary.recommended_output_tokens_per_second if shown else None
    return Headline(
        strategy=best.strategy,
        batch_size=best.batch_size,
        output_tokens_per_second=interval.mean if interval is not None else best.output_tokens_per_second,
        output_tokens_per_second_low=interval.low if interval is not None else None,
        output_tokens_per_second_high=interval.high if interval is not None else None,
        repeats=interval.repeats if interval is not None else None,
        certainty=summary.certainty if interval is not None else None,
        requests_per_second=best.requests_per_second,
        latency_p50_seconds=best.latency_p50_seconds,
        latency_p99_seconds=best.latency_p99_seconds,
    )
