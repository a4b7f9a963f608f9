"""The final results, pushed to a Prometheus Pushgateway once a run ends.

Grouped by ``job="batchmark"`` and the benchmark's name, with pushadd semantics (HTTP POST): the Pushgateway
replaces only the metric names in the push and keeps every other one of the group. A run that failed
pushes its failure marker alone, so the last good results and ``batchmark_last_success_timestamp_seconds``
stay as the last successful run left them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry, pushadd_to_gateway

from batchmark.runner import __version__, series
from batchmark.runner.results.report import Estimate, RepeatedBenchmark, RunReport

QUANTILE_FIELDS: Final = {"median": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99", "p999": "0.999"}
# Stop reasons that mean the benchmark did not finish its job, whatever it measured before.
FAILED_STOP_REASONS: Final = frozenset({"max_errors", "max_error_rate"})


def run_succeeded(report: RunReport | None) -> bool:
    """A run succeeded when it ran to its end and every benchmark completed requests without tripping an
    error constraint; its numbers are then the ones a dashboard should show."""
    if report is None or not report.complete or not report.benchmarks:
        return False
    return all(
        benchmark.requests.completed > 0 and benchmark.stop_reason not in FAILED_STOP_REASONS
        for benchmark in report.benchmarks
    )


# A benchmark's label set in the push: its strategy, its batch size and the other swept values.
BenchmarkLabels = tuple[str, str, str]


def results_registry(name: str, report: RunReport | None, now: float | None = None) -> CollectorRegistry:
    """The series of one push: the results and the success timestamp on success, the failure time alone
    otherwise."""
    registry = CollectorRegistry(auto_describe=True)
    now = time.time() if now is None else now
    if not run_succeeded(report):
        series.gauge(series.LAST_FAILURE, registry).set(now)
        return registry
    assert report is not None
    series.gauge(series.LAST_SUCCESS, registry).set(now)
    _push_run_info(registry, report)
    labels = _benchmark_labels(report)
    repeated_of = {index: entry for entry in report.repeated or [] for index in entry.benchmarks}
    _push_throughputs(registry, report, labels, repeated_of)
    _push_counts(registry, report, labels)
    _push_verdicts(registry, report, labels, repeated_of)
    return registry


def _push_run_info(registry: CollectorRegistry, report: RunReport) -> None:
    series.gauge(series.RESULT_INFO, registry).labels(
        run_id=report.run_id,
        model=report.engine.model,
        engine=report.engine.kind,
        batch_size=str(report.config.get("backend", {}).get("batch_size", "")),
        version=__version__,
    ).set(1)


def _benchmark_labels(report: RunReport) -> list[BenchmarkLabels]:
    """One label set per benchmark of the run (empty swept values without a sweep). A sweep has a bounded handful
    (MAX_SWEEP_BENCHMARKS), and each push replaces the last."""
    default_batch_size = report.config.get("backend", {}).get("batch_size", "")
    return [
        (
            benchmark.strategy,
            str(benchmark.batch_size or default_batch_size),
            ",".join(f"{name}={value}" for name, value in benchmark.swept.items() if name != "batch_size"),
        )
        for benchmark in report.benchmarks
    ]


def _push_throughputs(
    registry: CollectorRegistry,
    report: RunReport,
    labels: list[BenchmarkLabels],
    repeated_of: dict[int, RepeatedBenchmark],
) -> None:
    """Requests and tokens per second. With repeats, a benchmark's repeats share one label set: the throughput
    series carry the mean over them, and the interval and the repeat count come as series of their own."""
    requests = series.gauge(series.RESULT_REQUESTS_PER_SECOND, registry)
    output = series.gauge(series.RESULT_OUTPUT_TOKENS_PER_SECOND, registry)
    prompt = series.gauge(series.RESULT_PROMPT_TOKENS_PER_SECOND, registry)
    total = series.gauge(series.RESULT_TOTAL_TOKENS_PER_SECOND, registry)
    if report.repeated:
        interval = series.gauge(series.RESULT_OUTPUT_TOKENS_PER_SECOND_INTERVAL, registry)
        intervals = series.gauge(series.RESULT_INTERVAL, registry)
        repeats = series.gauge(series.RESULT_REPEATS, registry)
    for index, (benchmark, label) in enumerate(zip(report.benchmarks, labels, strict=True)):
        entry = repeated_of.get(index)
        if entry is None:
            requests.labels(*label).set(benchmark.throughput.requests_per_second)
            output.labels(*label).set(benchmark.throughput.output_tokens_per_second)
            prompt.labels(*label).set(benchmark.throughput.prompt_tokens_per_second)
            total.labels(*label).set(benchmark.throughput.total_tokens_per_second)
            continue
        requests.labels(*label).set(entry.requests_per_second.mean)
        output.labels(*label).set(entry.output_tokens_per_second.mean)
        total.labels(*label).set(entry.total_tokens_per_second.mean)
        prompt.labels(*label).set(entry.total_tokens_per_second.mean - entry.output_tokens_per_second.mean)
        repeats.labels(*label).set(entry.output_tokens_per_second.count)
        for bound in ("low", "high"):
            value = getattr(entry.output_tokens_per_second, bound)
            if value is not None:
                interval.labels(*label, bound).set(value)
        for figure_name in _INTERVAL_FIGURES:
            figure: Estimate | None = getattr(entry, figure_name)
            for bound in ("low", "high"):
                value = getattr(figure, bound) if figure is not None else None
                if value is not None:
                    intervals.labels(*label, figure_name, bound).set(value)


# The headline figures whose interval is pushed as batchmark_result_interval{figure=...}.
_INTERVAL_FIGURES = (
    "requests_per_second",
    "output_tokens_per_second",
    "total_tokens_per_second",
    "goodput_output_tokens_per_second",
    "cost_per_million_output_tokens",
)


def _push_counts(registry: CollectorRegistry, report: RunReport, labels: list[BenchmarkLabels]) -> None:
    """Requests by outcome, tokens by kind, the latency's quantiles, the durations and the engine's share."""
    requests = series.gauge(series.RESULT_REQUESTS, registry)
    tokens = series.gauge(series.RESULT_TOKENS, registry)
    latency = series.gauge(series.RESULT_REQUEST_LATENCY, registry)
    duration = series.gauge(series.RESULT_DURATION, registry)
    measured = series.gauge(series.RESULT_MEASURED_DURATION, registry)
    utilization = series.gauge(series.RESULT_ENGINE_UTILIZATION_RATIO, registry)
    for benchmark, label in zip(report.benchmarks, labels, strict=True):
        requests.labels(*label, "success").set(benchmark.requests.completed)
        requests.labels(*label, "error").set(benchmark.requests.errored)
        requests.labels(*label, "incomplete").set(benchmark.requests.incomplete)
        for kind, count in benchmark.tokens.items():
            tokens.labels(*label, kind).set(count)
        summary = benchmark.distributions.request_latency
        for field_name, quantile in QUANTILE_FIELDS.items():
            value = getattr(summary, field_name)
            if value is not None:
                latency.labels(*label, quantile).set(value)
        duration.labels(*label).set(benchmark.duration)
        measured.labels(*label).set(benchmark.measured_duration)
        utilization.labels(*label).set(benchmark.engine_utilization)


def _push_verdicts(
    registry: CollectorRegistry,
    report: RunReport,
    labels: list[BenchmarkLabels],
    repeated_of: dict[int, RepeatedBenchmark],
) -> None:
    """The recommendation (with repeats it marks all of the chosen benchmark's), and where the run has a latency
    budget or a GPU price, each benchmark's verdict, goodput and cost (the output ones as the mean over the
    repeats, which share a label set)."""
    chosen = report.recommendation.benchmark if report.recommendation is not None else None
    chosen_group = set(repeated_of[chosen].benchmarks) if chosen in repeated_of else {chosen}
    recommended = series.gauge(series.RESULT_RECOMMENDED, registry)
    for index, label in enumerate(labels):
        recommended.labels(*label).set(1 if index in chosen_group else 0)
    if any(benchmark.slo is not None for benchmark in report.benchmarks):
        slo_met = series.gauge(series.RESULT_SLO_MET, registry)
        goodput_requests = series.gauge(series.RESULT_GOODPUT_REQUESTS_PER_SECOND, registry)
        goodput_output = series.gauge(series.RESULT_GOODPUT_OUTPUT_TOKENS_PER_SECOND, registry)
        for index, (benchmark, label) in enumerate(zip(report.benchmarks, labels, strict=True)):
            if benchmark.slo is not None:
                slo_met.labels(*label).set(1 if benchmark.slo.met else 0)
                goodput_requests.labels(*label).set(benchmark.slo.goodput.requests_per_second)
                goodput = _mean_over_repeats(repeated_of.get(index), "goodput_output_tokens_per_second", None)
                goodput_output.labels(*label).set(
                    benchmark.slo.goodput.output_tokens_per_second if goodput is None else goodput
                )
    if any(benchmark.cost is not None for benchmark in report.benchmarks):
        cost = series.gauge(series.RESULT_COST_PER_MILLION_TOKENS, registry)
        for index, (benchmark, label) in enumerate(zip(report.benchmarks, labels, strict=True)):
            if benchmark.cost is None:
                continue
            output_price = benchmark.cost.per_million_output_tokens
            for kind, price in (
                ("output", _mean_over_repeats(repeated_of.get(index), "cost_per_million_output_tokens", output_price)),
                ("total", benchmark.cost.per_million_total_tokens),
            ):
                if price is not None:
                    cost.labels(*label, kind).set(price)


def _mean_over_repeats(entry: RepeatedBenchmark | None, name: str, single: float | None) -> float | None:
    """With repeats, the figure's mean over them (they share one label set), else the benchmark's own value."""
    figure: Estimate | None = getattr(entry, name) if entry is not None else None
    return figure.mean if figure is not None else single


@dataclass
class PushOutcome:
    """What happened to a push: it never raises, so the caller decides how loudly to report a failure."""

    ok: bool
    attempts: int
    error: str | None = None
    delays: list[float] = field(default_factory=list)


def push_results(
    gateway: str,
    name: str,
    report: RunReport | None,
    *,
    attempts: int = 4,
    first_delay: float = 1.0,
    request_timeout: float = 10.0,
    sleep: Callable[[float], object] = time.sleep,
    give_up: Callable[[], bool] = lambda: False,
) -> PushOutcome:
    """Push with retries and exponential back-off (1, 2, 4 s by default); gives up with the last error, or as soon
    as ``give_up()`` is true (the process is stopping) instead of another attempt."""
    registry = results_registry(name, report)

    error = ""
    delays: list[float] = []
    for attempt in range(1, attempts + 1):
        try:
            pushadd_to_gateway(
                gateway,
                job=series.PUSH_JOB,
                grouping_key={"benchmark": name},
                registry=registry,
                timeout=request_timeout,
            )
        except Exception as failure:  # any failure (refused, DNS, HTTP 4xx/5xx, a bad URL) is reported, never raised
            error = f"{type(failure).__name__}: {failure}"
            if attempt < attempts and not give_up():
                delay = first_delay * 2 ** (attempt - 1)
                delays.append(delay)
                sleep(delay)
            if give_up():
                return PushOutcome(ok=False, attempts=attempt, error=error, delays=delays)
            continue
        return PushOutcome(ok=True, attempts=attempt, delays=delays)
    return PushOutcome(ok=False, attempts=attempts, error=error, delays=delays)
