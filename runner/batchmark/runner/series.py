"""The metrics contract: every series batchmark exports, its type, help text and labels, named once.

Three sides export them: the runner's live /metrics (a run's progress), the Pushgateway push a run ends with (its
final results), and the operator's own /metrics (its health, and each finished BatchBenchmark's headline results).
Each side builds its prometheus_client objects from these declarations with ``counter``, ``gauge``, ``histogram``
and ``info``; the chart's dashboards and alert rules name only what is declared here, which
tests/unit/dashboards/test_contract.py checks by parsing their PromQL.

The bottom layer of the runner: it imports nothing from batchmark, so the operator and the dashboards read it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

Kind = Literal["counter", "gauge", "histogram", "info"]
Exporter = Literal["runner", "pushgateway", "operator"]

# The sample names prometheus_client writes for one family of each kind.
SAMPLE_SUFFIXES: Final[dict[Kind, tuple[str, ...]]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
}
# What Prometheus adds to every series at scrape: the target's job and instance, and the Prometheus Operator's
# monitors (the chart's PodMonitor of benchmark pods, ServiceMonitor of the operator) its namespace, pod,
# container and endpoint, the ServiceMonitor the Service's name besides.
SCRAPE_LABELS: Final = ("job", "instance", "namespace", "pod", "container", "endpoint", "service")
# The Pushgateway's grouping key of a run's push: every pushed series carries these.
PUSH_JOB: Final = "batchmark"
PUSH_GROUPING_LABELS: Final = ("job", "benchmark")


@dataclass(frozen=True)
class Series:
    """One exported metric family as one side exports it."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    exporter: Exporter
    # Histograms' bucket bounds; empty where the exporter computes them (from the run's batch size).
    buckets: tuple[float, ...] = ()
    # An info's keys, which become labels of its one sample.
    info_keys: tuple[str, ...] = ()

    @property
    def samples(self) -> tuple[str, ...]:
        """The names of its samples, as a query selects them."""
        return tuple(self.name + suffix for suffix in SAMPLE_SUFFIXES[self.kind])

    def sample(self, suffix: str = "") -> str:
        """One of its samples' names: ``sample("_total")`` of a counter, ``sample("_bucket")`` of a histogram."""
        if suffix not in SAMPLE_SUFFIXES[self.kind]:
            raise ValueError(f"a {self.kind} has no {suffix!r} samples: {self.name}")
        return self.name + suffix

    def labels_of(self, sample: str) -> frozenset[str]:
        """The labels one of its samples carries in Prometheus: its own, the histogram's `le`, those added at
        scrape, and for a pushed series the push's grouping key."""
        labels = {*self.labels, *self.info_keys, *SCRAPE_LABELS}
        if sample.endswith("_bucket") and self.kind == "histogram":
            labels.add("le")
        if self.exporter == "pushgateway":
            labels.update(PUSH_GROUPING_LABELS)
        return frozenset(labels)

    def exported_by(self, exporter: Exporter, labels: tuple[str, ...]) -> Series:
        """The same series (name, type and meaning) as another side exports it, with that side's labels."""
        return dataclasses.replace(self, exporter=exporter, labels=labels)


def _require_kind(series: Series, kind: Kind) -> None:
    if series.kind != kind:
        raise TypeError(f"{series.name} is a {series.kind}, not a {kind}")


def counter(series: Series, registry: CollectorRegistry) -> Counter:
    _require_kind(series, "counter")
    return Counter(series.name, series.help, series.labels, registry=registry)


def gauge(series: Series, registry: CollectorRegistry) -> Gauge:
    _require_kind(series, "gauge")
    return Gauge(series.name, series.help, series.labels, registry=registry)


def histogram(series: Series, registry: CollectorRegistry, buckets: Sequence[float] = ()) -> Histogram:
    """``buckets`` where the declaration leaves them to the exporter."""
    _require_kind(series, "histogram")
    bounds = series.buckets or tuple(buckets)
    if not bounds:
        raise ValueError(f"{series.name} needs its buckets")
    return Histogram(series.name, series.help, series.labels, buckets=bounds, registry=registry)


def info(series: Series, registry: CollectorRegistry) -> Info:
    _require_kind(series, "info")
    return Info(series.name, series.help, series.labels, registry=registry)


# The runner's live series. Every one carries the run's name, its id and the backend's batch size (a sweep's runs
# change it between points), and those of one engine's work its replica; no other label takes open-ended values.
RUN_LABELS: Final = ("benchmark", "run_id", "batch_size")
# What one engine did also carries which of the run's engine replicas did it ("0" with one; backend.replicas).
ENGINE_LABELS: Final = (*RUN_LABELS, "replica")
# Waits and latencies from 1 ms (a tiny batch on a fast GPU) to 1 h (a huge offline batch), roughly three
# buckets per decade, so a histogram_quantile() stays within a factor of about 2 anywhere in that range.
SECONDS_BUCKETS: Final[tuple[float, ...]] = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 1800.0, 3600.0),
)
# The harness's own time per batch: tens of microseconds when all is well, milliseconds when it is not.
OVERHEAD_BUCKETS: Final[tuple[float, ...]] = (
    *(0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025),
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)

REQUESTS: Final = Series(
    "batchmark_requests",
    "counter",
    "Measured requests by outcome: success, error, or incomplete (in flight when a benchmark stopped).",
    (*ENGINE_LABELS, "outcome"),
    "runner",
)
PROMPT_TOKENS: Final = Series(
    "batchmark_prompt_tokens",
    "counter",
    "Prompt tokens of measured successful requests, as the engine counted.",
    ENGINE_LABELS,
    "runner",
)
OUTPUT_TOKENS: Final = Series(
    "batchmark_output_tokens", "counter", "Tokens generated for measured successful requests.", ENGINE_LABELS, "runner"
)
REQUEST_LATENCY: Final = Series(
    "batchmark_request_latency_seconds",
    "histogram",
    "Enqueue to completion of measured requests.",
    ENGINE_LABELS,
    "runner",
    SECONDS_BUCKETS,
)
QUEUE_WAIT: Final = Series(
    "batchmark_queue_wait_seconds",
    "histogram",
    "Enqueue to dispatch into the engine.",
    ENGINE_LABELS,
    "runner",
    SECONDS_BUCKETS,
)
TIME_TO_FIRST_TOKEN: Final = Series(
    "batchmark_time_to_first_token_seconds",
    "histogram",
    "Enqueue to first token of measured requests: where the stream delivered it (the async backend), else from the"
    " engine's own timings where it gives them.",
    ENGINE_LABELS,
    "runner",
    SECONDS_BUCKETS,
)
# From a fraction of a millisecond (a small model's decode step on a GPU) to seconds (a stalled stream).
INTER_TOKEN_BUCKETS: Final[tuple[float, ...]] = (
    *(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05),
    *(0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
)
INTER_TOKEN_LATENCY: Final = Series(
    "batchmark_inter_token_latency_seconds",
    "histogram",
    "Interval between two output tokens of a measured request, as the stream delivered them (the async backend;"
    " the batch backend sees no token before its request ends).",
    ENGINE_LABELS,
    "runner",
    INTER_TOKEN_BUCKETS,
)
BATCH_WAIT: Final = Series(
    "batchmark_batch_wait_seconds",
    "histogram",
    "Enqueue until the request's micro-batch was complete (filled or timed out).",
    ENGINE_LABELS,
    "runner",
    SECONDS_BUCKETS,
)
BATCH_DURATION: Final = Series(
    "batchmark_batch_duration_seconds",
    "histogram",
    "One generate() call of a measured micro-batch.",
    ENGINE_LABELS,
    "runner",
    SECONDS_BUCKETS,
)
DISPATCH_OVERHEAD: Final = Series(
    "batchmark_dispatch_overhead_seconds",
    "histogram",
    "The harness's own time per measured batch (per report in continuous dispatch), outside the engine's "
    "calls: the engine waits for all of it.",
    ENGINE_LABELS,
    "runner",
    OVERHEAD_BUCKETS,
)
ENGINE_BUSY: Final = Series(
    "batchmark_engine_busy_seconds",
    "counter",
    "Seconds inside the engine's own calls (generate() or step()) for measured batches; its rate is the "
    "engine utilisation.",
    ENGINE_LABELS,
    "runner",
)
ENGINE_STEPS: Final = Series(
    "batchmark_engine_steps",
    "counter",
    "Engine steps (scheduler iterations) of measured batches.",
    ENGINE_LABELS,
    "runner",
)
# Its buckets follow the run's largest batch size (powers of two up to it): the runner passes them.
EFFECTIVE_BATCH_SIZE: Final = Series(
    "batchmark_effective_batch_size",
    "histogram",
    "Requests per measured micro-batch, as dispatched.",
    ENGINE_LABELS,
    "runner",
)
REQUESTS_IN_FLIGHT: Final = Series(
    "batchmark_requests_in_flight", "gauge", "Requests issued and not finished.", RUN_LABELS, "runner"
)
REQUESTS_QUEUED: Final = Series(
    "batchmark_requests_queued",
    "gauge",
    "Requests waiting in the engine worker for a micro-batch.",
    RUN_LABELS,
    "runner",
)
ENGINE_LOAD: Final = Series(
    "batchmark_engine_load_seconds",
    "gauge",
    "Time to load the engine, outside every timed phase.",
    RUN_LABELS,
    "runner",
)
PHASE: Final = Series(
    "batchmark_phase",
    "gauge",
    "1 for the phase the run is in (loading, warmup, measuring, cooldown, done), 0 for the others.",
    (*RUN_LABELS, "phase"),
    "runner",
)
RUN_INFO: Final = Series(
    "batchmark",
    "info",
    "The run: model, backend, engine, batch size and batchmark's version.",
    ("benchmark", "run_id"),
    "runner",
    info_keys=("model", "backend", "engine", "batch_size", "version"),
)
RUNNER_SERIES: Final = (
    REQUESTS,
    PROMPT_TOKENS,
    OUTPUT_TOKENS,
    REQUEST_LATENCY,
    QUEUE_WAIT,
    TIME_TO_FIRST_TOKEN,
    INTER_TOKEN_LATENCY,
    BATCH_WAIT,
    BATCH_DURATION,
    DISPATCH_OVERHEAD,
    ENGINE_BUSY,
    ENGINE_STEPS,
    EFFECTIVE_BATCH_SIZE,
    REQUESTS_IN_FLIGHT,
    REQUESTS_QUEUED,
    ENGINE_LOAD,
    PHASE,
    RUN_INFO,
)
# What a pod that runs only vLLM's workers of an engine over several pods exports instead.
ENGINE_NODE_WORKERS: Final = Series(
    "batchmark_engine_node_workers",
    "gauge",
    "1 while this pod holds its node of an engine over several pods (its node rank, above 0): from the wait for"
    " node 0, whose pod runs the benchmark, to the end of this node's vLLM workers; 0 after.",
    ("benchmark", "node"),
    "runner",
)
ENGINE_NODE_SERIES: Final = (ENGINE_NODE_WORKERS,)

# A run's final results, pushed once it ends. One label set per benchmark of the run: its strategy, its batch size
# and the other swept values ("field=value,...", empty without a sweep).
PUSHED_LABELS: Final = ("strategy", "batch_size", "swept")


def _pushed(name: str, help_text: str, extra: tuple[str, ...] = ()) -> Series:
    return Series(name, "gauge", help_text, (*PUSHED_LABELS, *extra), "pushgateway")


LAST_FAILURE: Final = Series(
    "batchmark_last_failure_timestamp_seconds",
    "gauge",
    "When the last failed run of this benchmark ended, Unix seconds.",
    (),
    "pushgateway",
)
LAST_SUCCESS: Final = Series(
    "batchmark_last_success_timestamp_seconds",
    "gauge",
    "When the last successful run of this benchmark ended, Unix seconds.",
    (),
    "pushgateway",
)
RESULT_INFO: Final = Series(
    "batchmark_result_info",
    "gauge",
    "The run the results come from: run id, model, engine, batch size and batchmark's version.",
    ("run_id", "model", "engine", "batch_size", "version"),
    "pushgateway",
)
RESULT_REQUESTS_PER_SECOND: Final = _pushed(
    "batchmark_result_requests_per_second", "Completed requests per measured second."
)
RESULT_OUTPUT_TOKENS_PER_SECOND: Final = _pushed(
    "batchmark_result_output_tokens_per_second", "Generated tokens per measured second."
)
RESULT_PROMPT_TOKENS_PER_SECOND: Final = _pushed(
    "batchmark_result_prompt_tokens_per_second", "Prompt tokens per measured second."
)
RESULT_TOTAL_TOKENS_PER_SECOND: Final = _pushed(
    "batchmark_result_total_tokens_per_second", "Prompt and generated tokens per second."
)
RESULT_REQUESTS: Final = _pushed("batchmark_result_requests", "Requests of the benchmark by outcome.", ("outcome",))
RESULT_TOKENS: Final = _pushed(
    "batchmark_result_tokens", "Tokens of measured requests by kind (prompt, output).", ("kind",)
)
RESULT_REQUEST_LATENCY: Final = _pushed(
    "batchmark_result_request_latency_seconds", "Quantiles of the request latency.", ("quantile",)
)
RESULT_DURATION: Final = _pushed(
    "batchmark_result_duration_seconds", "The whole benchmark, warm-up and cool-down included."
)
RESULT_MEASURED_DURATION: Final = _pushed(
    "batchmark_result_measured_duration_seconds", "The measured window of the benchmark."
)
RESULT_ENGINE_UTILIZATION_RATIO: Final = _pushed(
    "batchmark_result_engine_utilization_ratio", "Share of the window the engine generated."
)
RESULT_SLO_MET: Final = _pushed(
    "batchmark_result_slo_met", "1 when the benchmark met every target of the latency budget."
)
RESULT_GOODPUT_REQUESTS_PER_SECOND: Final = _pushed(
    "batchmark_result_goodput_requests_per_second", "Requests per second that met every per-request target."
)
RESULT_GOODPUT_OUTPUT_TOKENS_PER_SECOND: Final = _pushed(
    "batchmark_result_goodput_output_tokens_per_second",
    "Output tokens per second of the requests that met every per-request target.",
)
RESULT_COST_PER_MILLION_TOKENS: Final = _pushed(
    "batchmark_result_cost_per_million_tokens",
    "Cost of a million tokens (kind: output or total) at the given GPU price.",
    ("kind",),
)
RESULT_RECOMMENDED: Final = _pushed(
    "batchmark_result_recommended", "1 for the recommended benchmark (highest output tokens/s within budget)."
)
RESULT_OUTPUT_TOKENS_PER_SECOND_INTERVAL: Final = _pushed(
    "batchmark_result_output_tokens_per_second_interval",
    "With repeats: the 95% confidence interval of the mean output tokens/s (bound: low or high).",
    ("bound",),
)
RESULT_REPEATS: Final = _pushed("batchmark_result_repeats", "With repeats: measurements the mean figures come from.")
RESULT_INTERVAL: Final = _pushed(
    "batchmark_result_interval",
    "With repeats: the 95% confidence interval of a headline figure's mean (figure: requests_per_second,"
    " output_tokens_per_second, total_tokens_per_second, goodput_output_tokens_per_second or"
    " cost_per_million_output_tokens; bound: low or high), a t interval on the log values.",
    ("figure", "bound"),
)
PUSHED_SERIES: Final = (
    LAST_FAILURE,
    LAST_SUCCESS,
    RESULT_INFO,
    RESULT_REQUESTS_PER_SECOND,
    RESULT_OUTPUT_TOKENS_PER_SECOND,
    RESULT_PROMPT_TOKENS_PER_SECOND,
    RESULT_TOTAL_TOKENS_PER_SECOND,
    RESULT_REQUESTS,
    RESULT_TOKENS,
    RESULT_REQUEST_LATENCY,
    RESULT_DURATION,
    RESULT_MEASURED_DURATION,
    RESULT_ENGINE_UTILIZATION_RATIO,
    RESULT_SLO_MET,
    RESULT_GOODPUT_REQUESTS_PER_SECOND,
    RESULT_GOODPUT_OUTPUT_TOKENS_PER_SECOND,
    RESULT_COST_PER_MILLION_TOKENS,
    RESULT_RECOMMENDED,
    RESULT_OUTPUT_TOKENS_PER_SECOND_INTERVAL,
    RESULT_REPEATS,
    RESULT_INTERVAL,
)

# The operator's own series. Its per-benchmark ones carry the BatchBenchmark's namespace and name, which alerts route
# on: one series per existing BatchBenchmark, gone with it.
BENCHMARK_LABELS: Final = ("namespace", "name")
# Its result gauges: one series per benchmark of a resource's status.results, told apart by its batch size, the
# other swept values ("field=value,..."; empty without a sweep) and, with repeats, which repeat it is ("" without):
# as many series as the run had benchmarks, which the runner's limits bound, and all gone with the resource.
OPERATOR_RESULT_LABELS: Final = ("namespace", "name", "model", "batch_size", "strategy", "engine", "swept", "repeat")


def _operator_result(name: str, help_text: str) -> Series:
    return Series(name, "gauge", help_text, OPERATOR_RESULT_LABELS, "operator")


RECONCILES: Final = Series(
    "batchmark_operator_reconciles",
    "counter",
    "Reconciles of BatchBenchmarks and their Jobs and pods, by outcome (success, error, retry).",
    ("outcome",),
    "operator",
)
RECONCILE_DURATION: Final = Series(
    "batchmark_operator_reconcile_duration_seconds",
    "histogram",
    "Time one reconcile took, by outcome.",
    ("outcome",),
    "operator",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
BENCHMARKS: Final = Series(
    "batchmark_operator_benchmarks", "gauge", "BatchBenchmarks currently in each phase.", ("phase",), "operator"
)
BENCHMARK_PHASE: Final = Series(
    "batchmark_operator_benchmark_phase",
    "gauge",
    "1 for the phase each BatchBenchmark is in (one series per BatchBenchmark, gone with it).",
    (*BENCHMARK_LABELS, "phase"),
    "operator",
)
BENCHMARK_STARTING: Final = Series(
    "batchmark_operator_benchmark_starting",
    "gauge",
    "1 while a BatchBenchmark's current pod waits to start (phase Scheduling, or a retry's pod under reason"
    " Retrying); the series is gone once it starts or the benchmark ends.",
    BENCHMARK_LABELS,
    "operator",
)
BENCHMARK_FAILURE: Final = Series(
    "batchmark_operator_benchmark_failure_timestamp_seconds",
    "gauge",
    "When each failed BatchBenchmark failed (its status.completionTime), Unix seconds, by its reason.",
    (*BENCHMARK_LABELS, "reason"),
    "operator",
)
BENCHMARK_REGRESSED: Final = Series(
    "batchmark_operator_benchmark_regressed",
    "gauge",
    "For a finished BatchBenchmark with a baseline: 1 when it regressed against it (its output tokens/s fell"
    " significantly and beyond the threshold), 0 when not; no series without a verdict.",
    (*BENCHMARK_LABELS, "baseline"),
    "operator",
)
# The three throughputs the push has too: the same series, labelled by the resource rather than the push's group.
OPERATOR_OUTPUT_TOKENS_PER_SECOND: Final = RESULT_OUTPUT_TOKENS_PER_SECOND.exported_by(
    "operator", OPERATOR_RESULT_LABELS
)
OPERATOR_TOTAL_TOKENS_PER_SECOND: Final = RESULT_TOTAL_TOKENS_PER_SECOND.exported_by("operator", OPERATOR_RESULT_LABELS)
OPERATOR_REQUESTS_PER_SECOND: Final = RESULT_REQUESTS_PER_SECOND.exported_by("operator", OPERATOR_RESULT_LABELS)
OPERATOR_LATENCY_P50: Final = _operator_result(
    "batchmark_result_request_latency_p50_seconds", "Median request latency, seconds."
)
OPERATOR_LATENCY_P99: Final = _operator_result(
    "batchmark_result_request_latency_p99_seconds", "p99 request latency, seconds."
)
OPERATOR_TTFT_P99: Final = _operator_result("batchmark_result_ttft_p99_seconds", "p99 time to first token, seconds.")
OPERATOR_ENGINE_UTILIZATION: Final = _operator_result(
    "batchmark_result_engine_utilization", "Share of the window the engine was busy, 0-1."
)
OPERATOR_RESULT_SERIES: Final = (
    OPERATOR_OUTPUT_TOKENS_PER_SECOND,
    OPERATOR_TOTAL_TOKENS_PER_SECOND,
    OPERATOR_REQUESTS_PER_SECOND,
    OPERATOR_LATENCY_P50,
    OPERATOR_LATENCY_P99,
    OPERATOR_TTFT_P99,
    OPERATOR_ENGINE_UTILIZATION,
)
OPERATOR_SERIES: Final = (
    RECONCILES,
    RECONCILE_DURATION,
    BENCHMARKS,
    BENCHMARK_PHASE,
    BENCHMARK_STARTING,
    BENCHMARK_FAILURE,
    BENCHMARK_REGRESSED,
    *OPERATOR_RESULT_SERIES,
)

SERIES: Final = (*RUNNER_SERIES, *ENGINE_NODE_SERIES, *PUSHED_SERIES, *OPERATOR_SERIES)


def selected_by(sample: str) -> tuple[Series, ...]:
    """The declarations a query's series name selects: more than one where two sides export the same series."""
    return tuple(series for series in SERIES if sample in series.samples)
