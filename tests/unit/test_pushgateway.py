"""What a push carries on success and on failure, and how a push that cannot reach the gateway ends."""

from __future__ import annotations

import socket

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner.pushgateway import push_results, results_registry, run_succeeded
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
    key = ("batchmark_result_output_tokens_per_second", (("strategy", strategy),))
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
