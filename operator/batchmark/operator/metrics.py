"""The operator's own /metrics (the names are an interface: the chart's dashboards and alerts read them)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from batchmark.operator.api import PHASES
from batchmark.runner.config import BackendConfig

# One series per benchmark of a resource's status.results, told apart by its batch size, the other swept values
# ("field=value,..."; empty without a sweep) and, with repeats, which repeat it is ("" without): as many series
# as the run had benchmarks, which the runner's limits bound, and all gone with the resource.
RESULT_LABELS = ("namespace", "name", "model", "batch_size", "strategy", "engine", "swept", "repeat")
SWEPT_LABEL_LIMIT = 256
DEFAULT_ENGINE = str(BackendConfig.model_fields["engine"].default)  # a spec that names no engine runs this one
# One series per existing BatchBenchmark: alerts route on its namespace and name.
BENCHMARK_LABELS = ("namespace", "name")
RECONCILE_OUTCOMES = ("success", "error", "retry")
# Gauge name -> the field of a status.results entry it shows.
RESULT_GAUGES = {
    "batchmark_result_output_tokens_per_second": ("outputTokensPerSecond", "Output tokens per second."),
    "batchmark_result_total_tokens_per_second": ("totalTokensPerSecond", "Prompt and output tokens per second."),
    "batchmark_result_requests_per_second": ("requestsPerSecond", "Completed requests per second."),
    "batchmark_result_request_latency_p50_seconds": ("latencyP50Seconds", "Median request latency, seconds."),
    "batchmark_result_request_latency_p99_seconds": ("latencyP99Seconds", "p99 request latency, seconds."),
    "batchmark_result_ttft_p99_seconds": ("ttftP99Seconds", "p99 time to first token, seconds."),
    "batchmark_result_engine_utilization": ("engineUtilization", "Share of the window the engine was busy, 0-1."),
}


def swept_label(swept: object) -> str:
    """The swept values other than the batch size (which has its own label), as the Pushgateway's push writes
    them: "field=value,..." in the sweep's order, "" without."""
    if not isinstance(swept, Mapping):
        return ""
    text = ",".join(f"{field}={value}" for field, value in swept.items() if field not in {"batch_size", "batchSize"})
    # The status is writable by more than the runner: a label stays a label, not a document.
    return text[:SWEPT_LABEL_LIMIT]


class OperatorMetrics:
    """Reconcile counts and durations, benchmarks by phase (counted, and one series each for alerts to route on),
    failures' times, and finished benchmarks' headline results."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "batchmark_operator_reconciles",
            "Reconciles of BatchBenchmarks and their Jobs and pods, by outcome (success, error, retry).",
            ["outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "batchmark_operator_reconcile_duration_seconds",
            "Time one reconcile took, by outcome.",
            ["outcome"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.benchmarks = Gauge(
            "batchmark_operator_benchmarks",
            "BatchBenchmarks currently in each phase.",
            ["phase"],
            registry=self.registry,
        )
        self.phase = Gauge(
            "batchmark_operator_benchmark_phase",
            "1 for the phase each BatchBenchmark is in (one series per BatchBenchmark, gone with it).",
            [*BENCHMARK_LABELS, "phase"],
            registry=self.registry,
        )
        self.failed_at = Gauge(
            "batchmark_operator_benchmark_failure_timestamp_seconds",
            "When each failed BatchBenchmark failed (its status.completionTime), Unix seconds, by its reason.",
            [*BENCHMARK_LABELS, "reason"],
            registry=self.registry,
        )
        self.results = {
            name: Gauge(name, help_text, RESULT_LABELS, registry=self.registry)
            for name, (_, help_text) in RESULT_GAUGES.items()
        }
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], str] = {}
        self._failures: dict[tuple[str, str], str] = {}
        self._series: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        for phase in PHASES:
            self.benchmarks.labels(phase).set(0)
        # Every outcome's series exists from the start (at 0), so an error rate reads 0 rather than "no data"
        # before the first error, and rate() sees the first error as an increase.
        for outcome in RECONCILE_OUTCOMES:
            self.reconciles.labels(outcome)
            self.duration.labels(outcome)

    def observe_reconcile(self, outcome: str, seconds: float) -> None:
        self.reconciles.labels(outcome).inc()
        self.duration.labels(outcome).observe(seconds)

    def set_phase(self, namespace: str, name: str, phase: str | None) -> None:
        with self._lock:
            previous = self._phases.get((namespace, name))
            if previous is not None and previous != phase:
                self.phase.remove(namespace, name, previous)
            if phase is None:
                self._phases.pop((namespace, name), None)
            else:
                self._phases[(namespace, name)] = phase
                self.phase.labels(namespace, name, phase).set(1)
            counts: dict[str, int] = dict.fromkeys(PHASES, 0)
            for current in self._phases.values():
                counts[current] = counts.get(current, 0) + 1
            for each, count in counts.items():
                self.benchmarks.labels(each).set(count)

    def set_failure(self, namespace: str, name: str, reason: str, completion_time: str) -> None:
        """The benchmark failed at ``completion_time`` (RFC 3339): the same time after an operator restart, so an
        alert on it fires once per failure."""
        try:
            at = datetime.datetime.fromisoformat(completion_time.replace("Z", "+00:00")).timestamp()
        except ValueError:  # the status is writable by more than the operator: never crash on it
            return
        with self._lock:
            previous = self._failures.get((namespace, name))
            if previous is not None and previous != reason:
                self.failed_at.remove(namespace, name, previous)
            self._failures[(namespace, name)] = reason
            self.failed_at.labels(namespace, name, reason).set(at)

    def set_results(
        self, namespace: str, name: str, spec: Mapping[str, Any], results: Sequence[Mapping[str, Any]]
    ) -> None:
        """One series per benchmark of the resource; replaces what it showed before."""
        backend = spec.get("backend") or {}
        model = str(backend.get("model", ""))
        default_batch_size = backend.get("batchSize", backend.get("batch_size", ""))
        engine = str(backend.get("engine", DEFAULT_ENGINE))
        with self._lock:
            self._drop(namespace, name)
            series: list[tuple[str, ...]] = []
            for entry in results:
                swept = entry.get("swept")
                # A termination message cut to fit keeps the swept values but may drop batchSize.
                swept_batch_size = swept.get("batch_size") if isinstance(swept, Mapping) else None
                labels = (
                    namespace,
                    name,
                    model,
                    str(entry.get("batchSize") or swept_batch_size or default_batch_size),
                    str(entry.get("strategy", "")),
                    engine,
                    swept_label(swept),
                    "" if entry.get("repeat") is None else str(entry.get("repeat")),
                )
                for gauge_name, (field, _) in RESULT_GAUGES.items():
                    value = entry.get(field)
                    if isinstance(value, int | float):
                        self.results[gauge_name].labels(*labels).set(value)
                series.append(labels)
            self._series[(namespace, name)] = series

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: its series go too."""
        self.set_phase(namespace, name, None)
        with self._lock:
            self._drop(namespace, name)
            reason = self._failures.pop((namespace, name), None)
            if reason is not None:
                self.failed_at.remove(namespace, name, reason)

    def _drop(self, namespace: str, name: str) -> None:
        for labels in self._series.pop((namespace, name), []):
            for gauge in self.results.values():
                try:
                    gauge.remove(*labels)
                except KeyError:
                    continue
