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

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from batchmark.runner import __version__
from batchmark.runner.results.report import RunReport

JOB: Final = "batchmark"
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


def results_registry(name: str, report: RunReport | None, now: float | None = None) -> CollectorRegistry:
    """The series of one push: the results and the success timestamp on success, the failure time alone
    otherwise."""
    registry = CollectorRegistry(auto_describe=True)
    now = time.time() if now is None else now
    if not run_succeeded(report):
        Gauge(
            "batchmark_last_failure_timestamp_seconds",
            "When the last failed run of this benchmark ended, Unix seconds.",
            registry=registry,
        ).set(now)
        return registry
    assert report is not None
    Gauge(
        "batchmark_last_success_timestamp_seconds",
        "When the last successful run of this benchmark ended, Unix seconds.",
        registry=registry,
    ).set(now)
    info = Gauge(
        "batchmark_result_info",
        "The run the results come from: run id, model, engine, batch size and batchmark's version.",
        ["run_id", "model", "engine", "batch_size", "version"],
        registry=registry,
    )
    info.labels(
        run_id=report.run_id,
        model=report.engine.model,
        engine=report.engine.kind,
        batch_size=str(report.config.get("backend", {}).get("batch_size", "")),
        version=__version__,
    ).set(1)
    # One label set per benchmark of the run: its strategy, its batch size and the other swept values (empty
    # without a sweep). A sweep has a bounded handful (MAX_SWEEP_BENCHMARKS), and each push replaces the last.
    strategy = ["strategy", "batch_size", "swept"]
    default_batch_size = report.config.get("backend", {}).get("batch_size", "")

    def gauge(metric: str, documentation: str, extra: list[str] | None = None) -> Gauge:
        return Gauge(metric, documentation, strategy + (extra or []), registry=registry)

    throughput = {
        "requests": gauge("batchmark_result_requests_per_second", "Completed requests per measured second."),
        "output": gauge("batchmark_result_output_tokens_per_second", "Generated tokens per measured second."),
        "prompt": gauge("batchmark_result_prompt_tokens_per_second", "Prompt tokens per measured second."),
        "total": gauge("batchmark_result_total_tokens_per_second", "Prompt and generated tokens per second."),
    }
    requests = gauge("batchmark_result_requests", "Requests of the benchmark by outcome.", ["outcome"])
    tokens = gauge("batchmark_result_tokens", "Tokens of measured requests by kind (prompt, output).", ["kind"])
    latency = gauge("batchmark_result_request_latency_seconds", "Quantiles of the request latency.", ["quantile"])
    duration = gauge("batchmark_result_duration_seconds", "The whole benchmark, warm-up and cool-down included.")
    measured = gauge("batchmark_result_measured_duration_seconds", "The measured window of the benchmark.")
    utilization = gauge("batchmark_result_engine_utilization_ratio", "Share of the window the engine generated.")
    budgeted = any(benchmark.slo is not None for benchmark in report.benchmarks)
    priced = any(benchmark.cost is not None for benchmark in report.benchmarks)
    if budgeted:
        slo_met = gauge("batchmark_result_slo_met", "1 when the benchmark met every target of the latency budget.")
        goodput_requests = gauge(
            "batchmark_result_goodput_requests_per_second", "Requests per second that met every per-request target."
        )
        goodput_output = gauge(
            "batchmark_result_goodput_output_tokens_per_second",
            "Output tokens per second of the requests that met every per-request target.",
        )
    if priced:
        cost = gauge(
            "batchmark_result_cost_per_million_tokens",
            "Cost of a million tokens (kind: output or total) at the given GPU price.",
            ["kind"],
        )
    recommended = gauge(
        "batchmark_result_recommended", "1 for the recommended benchmark (highest output tokens/s within budget)."
    )
    chosen = report.recommendation.benchmark if report.recommendation is not None else None
    # With repeats, a benchmark's repeats share one label set: the throughput series carry the mean over them,
    # the interval and the repeat count come as series of their own, and the recommended mark covers them all.
    repeated_of = {index: entry for entry in report.repeated or [] for index in entry.benchmarks}
    if report.repeated:
        interval = gauge(
            "batchmark_result_output_tokens_per_second_interval",
            "With repeats: the 95% confidence interval of the mean output tokens/s (bound: low or high).",
            ["bound"],
        )
        repeats = gauge("batchmark_result_repeats", "With repeats: measurements the mean figures come from.")
        if chosen is not None and chosen in repeated_of:
            chosen_group = set(repeated_of[chosen].benchmarks)
    for index, benchmark in enumerate(report.benchmarks):
        label = (
            benchmark.strategy,
            str(benchmark.batch_size or default_batch_size),
            ",".join(f"{name}={value}" for name, value in benchmark.swept.items() if name != "batch_size"),
        )
        throughput["requests"].labels(*label).set(benchmark.throughput.requests_per_second)
        throughput["output"].labels(*label).set(benchmark.throughput.output_tokens_per_second)
        throughput["prompt"].labels(*label).set(benchmark.throughput.prompt_tokens_per_second)
        throughput["total"].labels(*label).set(benchmark.throughput.total_tokens_per_second)
        entry = repeated_of.get(index)
        if entry is not None:
            throughput["requests"].labels(*label).set(entry.requests_per_second.mean)
            throughput["output"].labels(*label).set(entry.output_tokens_per_second.mean)
            throughput["total"].labels(*label).set(entry.total_tokens_per_second.mean)
            throughput["prompt"].labels(*label).set(
                entry.total_tokens_per_second.mean - entry.output_tokens_per_second.mean
            )
            repeats.labels(*label).set(entry.output_tokens_per_second.count)
            for bound in ("low", "high"):
                value = getattr(entry.output_tokens_per_second, bound)
                if value is not None:
                    interval.labels(*label, bound).set(value)
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
        if entry is not None and chosen in repeated_of:
            recommended.labels(*label).set(1 if index in chosen_group else 0)
        else:
            recommended.labels(*label).set(1 if index == chosen else 0)
        if budgeted and benchmark.slo is not None:
            slo_met.labels(*label).set(1 if benchmark.slo.met else 0)
            goodput_requests.labels(*label).set(benchmark.slo.goodput.requests_per_second)
            goodput_output.labels(*label).set(benchmark.slo.goodput.output_tokens_per_second)
        if priced and benchmark.cost is not None:
            for kind, price in (
                ("output", benchmark.cost.per_million_output_tokens),
                ("total", benchmark.cost.per_million_total_tokens),
            ):
                if price is not None:
                    cost.labels(*label, kind).set(price)
    return registry


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
                gateway, job=JOB, grouping_key={"benchmark": name}, registry=registry, timeout=request_timeout
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
