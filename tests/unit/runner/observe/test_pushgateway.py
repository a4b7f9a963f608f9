"""What a push carries on success and on failure, and how a push that cannot reach the gateway ends."""

from __future__ import annotations

import socket

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner.observe.pushgateway import push_results, results_registry, run_succeeded
from tests.unit.observability_data import benchmark, report, simple_report


def names(registry_text: str) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(registry_text) for sample in family.samples}


def test_success_needs_a_complete_run_with_completed_requests() -> None:
    good = simple_report()
    assert run_succeeded(good)
    assert not run_succeeded(None)  # the engine failed: no report at all
    assert not run_succeeded(good.model_copy(update={"complete": False}))
    failed_only = benchmark([])
    assert not run_succeeded(report([failed_only]))
    tripped = good.benchmarks[0].model_copy(update={"stop_reason": "max_error_rate"})
    assert not run_succeeded(report([tripped]))


def test_a_failure_pushes_its_timestamp_alone() -> None:
    text = generate_latest(results_registry("unit", None, now=123.0)).decode()
    assert names(text) == {"batchmark_last_failure_timestamp_seconds"}


def test_a_success_pushes_results_and_its_timestamp() -> None:
    good = simple_report()
    text = generate_latest(results_registry("unit", good, now=456.0)).decode()
    pushed = names(text)
    assert "batchmark_last_failure_timestamp_seconds" not in pushed
    assert {
        "batchmark_last_success_timestamp_seconds",
        "batchmark_result_output_tokens_per_second",
        "batchmark_result_requests_per_second",
        "batchmark_result_requests",
        "batchmark_result_request_latency_seconds",
        "batchmark_result_duration_seconds",
    } <= pushed
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    strategy = good.benchmarks[0].strategy
    batch_size = str(good.config["backend"]["batch_size"])
    key = (
        "batchmark_result_output_tokens_per_second",
        (("batch_size", batch_size), ("strategy", strategy), ("swept", "")),
    )
    assert samples[key] == good.benchmarks[0].throughput.output_tokens_per_second
    assert samples[("batchmark_last_success_timestamp_seconds", ())] == 456.0


def test_an_unreachable_gateway_is_retried_with_back_off_then_reported() -> None:
    with socket.socket() as listener:  # a port that refuses connections: bound, never listening
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        outcome = push_results(f"http://127.0.0.1:{port}", "unit", simple_report(), attempts=3, first_delay=0.01)
    assert not outcome.ok
    assert outcome.attempts == 3
    assert outcome.delays == [0.01, 0.02]
    assert outcome.error is not None
    assert "refused" in outcome.error.lower()


def test_a_sweep_pushes_each_point_under_its_batch_size_with_budget_cost_and_recommendation() -> None:
    from batchmark.runner.results.budget import recommend
    from batchmark.runner.results.report import CostFigures, Goodput, SloVerdict

    base = simple_report().benchmarks[0]
    points = []
    for index, (size, met) in enumerate(((4, True), (8, False))):
        points.append(
            base.model_copy(
                update={
                    "swept": {"batch_size": size, "dispatch": "continuous"},
                    "batch_size": size,
                    "slo": SloVerdict(
                        met=met,
                        targets=[],
                        goodput=Goodput(requests=3, requests_per_second=1.5, output_tokens_per_second=12.0),
                    ),
                    "cost": CostFigures(
                        gpus=1,
                        gpu_cost_per_hour=2.0,
                        per_million_output_tokens=10.0 + index,
                        per_million_total_tokens=2.0,
                    ),
                }
            )
        )
    swept = report(points).model_copy(update={"recommendation": recommend(points, budget=True)})
    text = generate_latest(results_registry("unit", swept, now=1.0)).decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    def labels(size: int, **extra: str) -> tuple[tuple[str, str], ...]:
        values = {"strategy": base.strategy, "batch_size": str(size), "swept": "dispatch=continuous", **extra}
        return tuple(sorted(values.items()))

    assert samples[("batchmark_result_output_tokens_per_second", labels(4))] == base.throughput.output_tokens_per_second
    assert samples[("batchmark_result_output_tokens_per_second", labels(8))] == base.throughput.output_tokens_per_second
    assert samples[("batchmark_result_slo_met", labels(4))] == 1
    assert samples[("batchmark_result_slo_met", labels(8))] == 0
    assert samples[("batchmark_result_goodput_output_tokens_per_second", labels(8))] == 12.0
    assert samples[("batchmark_result_cost_per_million_tokens", labels(8, kind="output"))] == 11.0
    assert samples[("batchmark_result_recommended", labels(4))] == 1
    assert samples[("batchmark_result_recommended", labels(8))] == 0


def test_a_stopping_process_makes_no_further_attempt() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    slept: list[float] = []
    outcome = push_results(
        f"http://127.0.0.1:{port}", "unit", simple_report(), attempts=4, sleep=slept.append, give_up=lambda: True
    )
    assert not outcome.ok
    assert outcome.attempts == 1
    assert slept == []
