"""The operator's per-benchmark series, which the chart's alerts route on: one phase series per benchmark,
its failure's time (the same after a restart), all gone with the benchmark."""

from __future__ import annotations

import json

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.runner.results.summary import fit_summary, summary_json
from batchmark.runner.statusfields import BenchmarkSummary, RunSummary


def series(metrics: OperatorMetrics, name: str) -> dict[frozenset[tuple[str, str]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def test_each_benchmark_has_one_phase_series_that_follows_it() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("team-a", "sweep", "Scheduling")
    metrics.set_phase("team-b", "sweep", "Scheduling")
    metrics.set_phase("team-a", "sweep", "Running")
    assert series(metrics, "batchmark_operator_benchmark_phase") == {
        labels(namespace="team-a", name="sweep", phase="Running"): 1,
        labels(namespace="team-b", name="sweep", phase="Scheduling"): 1,
    }
    counts = series(metrics, "batchmark_operator_benchmarks")
    assert counts[labels(phase="Running")] == 1
    assert counts[labels(phase="Scheduling")] == 1
    metrics.forget("team-b", "sweep")
    assert series(metrics, "batchmark_operator_benchmark_phase") == {
        labels(namespace="team-a", name="sweep", phase="Running"): 1
    }


def test_a_failure_is_stamped_with_its_completion_time_until_the_benchmark_goes() -> None:
    metrics = OperatorMetrics()
    metrics.set_phase("team-a", "broken", "Failed")
    metrics.set_failure("team-a", "broken", "EngineError", "2026-01-02T03:04:05Z")
    # Seen again (another reconcile, or a restarted operator): the same series and time, so no new alert.
    metrics.set_failure("team-a", "broken", "EngineError", "2026-01-02T03:04:05Z")
    failed = labels(namespace="team-a", name="broken", reason="EngineError")
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {failed: 1767323045.0}
    metrics.set_failure("team-a", "broken", "no time", "yesterday")  # a status nobody should have written
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {failed: 1767323045.0}
    metrics.forget("team-a", "broken")
    assert series(metrics, "batchmark_operator_benchmark_failure_timestamp_seconds") == {}
    assert series(metrics, "batchmark_operator_benchmark_phase") == {}


def test_sweep_points_and_repeats_are_series_of_their_own_that_go_with_the_benchmark() -> None:
    metrics = OperatorMetrics()
    spec = {"backend": {"model": "m", "batchSize": 8, "engine": "simulated"}}
    results = [
        {"strategy": "throughputx64", "swept": {"batch_size": size, "max_num_seqs": 64}, "batchSize": size}
        | {"repeat": repeat, "outputTokensPerSecond": 100.0 * size + repeat}
        for repeat in range(2)
        for size in (8, 16)
    ]
    metrics.set_results("team-a", "sweep", spec, results)
    common = {"namespace": "team-a", "name": "sweep", "model": "m", "strategy": "throughputx64", "engine": "simulated"}
    assert series(metrics, "batchmark_result_output_tokens_per_second") == {
        labels(**common, batch_size=str(size), swept="max_num_seqs=64", repeat=str(repeat)): 100.0 * size + repeat
        for repeat in range(2)
        for size in (8, 16)
    }
    # A run without a sweep or repeats: the spec's batch size, empty swept and repeat labels; the sweep's series
    # are replaced, not added to.
    metrics.set_results("team-a", "sweep", spec, [{"strategy": "throughputx64", "outputTokensPerSecond": 5.0}])
    assert series(metrics, "batchmark_result_output_tokens_per_second") == {
        labels(**common, batch_size="8", swept="", repeat=""): 5.0
    }
    metrics.forget("team-a", "sweep")
    assert series(metrics, "batchmark_result_output_tokens_per_second") == {}


def test_a_cut_termination_message_keeps_points_and_repeats_apart() -> None:
    metrics = OperatorMetrics()
    full = RunSummary(
        run_id="r",
        complete=True,
        results=[
            BenchmarkSummary(
                strategy="throughputx8",
                swept={"batch_size": size},
                batch_size=size,
                repeat=repeat,
                output_tokens_per_second=1000.0 + size + repeat,
                latency_p50_seconds=0.5,
                latency_p99_seconds=0.9,
                requests_per_second=10.0,
            )
            for repeat in range(3)
            for size in (2, 4)
        ],
    )
    # Tight enough that the runner cuts the summary down to its last level of fields, keeping every benchmark.
    cut = fit_summary(full, 800)
    assert cut.omitted_benchmarks == 0
    assert all(entry.batch_size is None and entry.latency_p50_seconds is None for entry in cut.results)
    results = json.loads(summary_json(cut))["results"]
    metrics.set_results("team-a", "cut", {"backend": {"model": "m", "batchSize": 1}}, results)
    found = series(metrics, "batchmark_result_output_tokens_per_second")
    assert sorted((dict(key)["batch_size"], dict(key)["repeat"], value) for key, value in found.items()) == sorted(
        (str(size), str(repeat), 1000.0 + size + repeat) for repeat in range(3) for size in (2, 4)
    )


def test_a_swept_label_written_into_the_status_by_hand_stays_short() -> None:
    metrics = OperatorMetrics()
    entry = {"strategy": "s", "swept": {"request_format": "x" * 10_000}, "outputTokensPerSecond": 1.0}
    metrics.set_results("team-a", "odd", {}, [entry])
    (key,) = series(metrics, "batchmark_result_output_tokens_per_second")
    assert len(dict(key)["swept"]) == 256
