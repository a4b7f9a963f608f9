"""The operator's own /metrics, built from the metrics contract (batchmark.runner.series): the names are an
interface, which the chart's dashboards and alerts read."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from batchmark.operator.controller.stalls import parse_time
from batchmark.operator.resource.status import Phase
from batchmark.runner import series
from batchmark.runner.config.backend import BackendConfig

SWEPT_LABEL_LIMIT = 256
DEFAULT_ENGINE = str(BackendConfig.model_fields["engine"].default)  # a spec that names no engine runs this one
RECONCILE_OUTCOMES = ("success", "error", "retry")
# Each result gauge and the field of a status.results entry it shows.
RESULT_FIELDS: dict[series.Series, str] = {
    series.OPERATOR_OUTPUT_TOKENS_PER_SECOND: "outputTokensPerSecond",
    series.OPERATOR_TOTAL_TOKENS_PER_SECOND: "totalTokensPerSecond",
    series.OPERATOR_REQUESTS_PER_SECOND: "requestsPerSecond",
    series.OPERATOR_LATENCY_P50: "latencyP50Seconds",
    series.OPERATOR_LATENCY_P99: "latencyP99Seconds",
    series.OPERATOR_TTFT_P99: "ttftP99Seconds",
    series.OPERATOR_ENGINE_UTILIZATION: "engineUtilization",
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
        self.reconciles = series.counter(series.RECONCILES, self.registry)
        self.duration = series.histogram(series.RECONCILE_DURATION, self.registry)
        self.benchmarks = series.gauge(series.BENCHMARKS, self.registry)
        self.phase = series.gauge(series.BENCHMARK_PHASE, self.registry)
        self.failed_at = series.gauge(series.BENCHMARK_FAILURE, self.registry)
        self.starting = series.gauge(series.BENCHMARK_STARTING, self.registry)
        self.regressed = series.gauge(series.BENCHMARK_REGRESSED, self.registry)
        self.results = {declared: series.gauge(declared, self.registry) for declared in RESULT_FIELDS}
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], str] = {}
        self._starting: set[tuple[str, str]] = set()
        self._failures: dict[tuple[str, str], str] = {}
        self._baselines: dict[tuple[str, str], str] = {}
        self._series: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        for phase in Phase:
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
            counts: dict[str, int] = dict.fromkeys(map(str, Phase), 0)
            for current in self._phases.values():
                counts[current] = counts.get(current, 0) + 1
            for each, count in counts.items():
                self.benchmarks.labels(each).set(count)

    def set_starting(self, namespace: str, name: str, starting: bool) -> None:
        """Whether the benchmark's current pod waits to start: the stuck-scheduling alert's series, which sees a
        retry's pod too, whose benchmark keeps the phase it had reached (Running)."""
        with self._lock:
            key = (namespace, name)
            if starting:
                self._starting.add(key)
                self.starting.labels(namespace, name).set(1)
            elif key in self._starting:
                self._starting.discard(key)
                self.starting.remove(namespace, name)

    def set_failure(self, namespace: str, name: str, reason: str, completion_time: str) -> None:
        """The benchmark failed at ``completion_time`` (RFC 3339): the same time after an operator restart, so an
        alert on it fires once per failure."""
        parsed = parse_time(completion_time)
        if parsed is None:  # the status is writable by more than the operator: never crash on it
            return
        at = parsed.timestamp()
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
                for declared, field in RESULT_FIELDS.items():
                    value = entry.get(field)
                    if isinstance(value, int | float):
                        self.results[declared].labels(*labels).set(value)
                series.append(labels)
            self._series[(namespace, name)] = series

    def set_regression(self, namespace: str, name: str, regression: Mapping[str, Any] | None) -> None:
        """The verdict against the baseline (status.regression): 1 regressed, 0 not; no series without one."""
        verdict = regression.get("verdict") if isinstance(regression, Mapping) else None
        baseline = str(regression.get("baseline") or "") if isinstance(regression, Mapping) else ""
        with self._lock:
            key = (namespace, name)
            previous = self._baselines.pop(key, None)
            if previous is not None:
                self.regressed.remove(namespace, name, previous)
            if verdict in ("True", "False"):
                self._baselines[key] = baseline
                self.regressed.labels(namespace, name, baseline).set(1 if verdict == "True" else 0)

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: its series go too."""
        self.set_phase(namespace, name, None)
        self.set_starting(namespace, name, False)
        self.set_regression(namespace, name, None)
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
