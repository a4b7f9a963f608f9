"""The compact summary: the status's results and the termination message, capped at 4 KiB as whole JSON."""

from __future__ import annotations

import json

from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import Completion, EngineTimings
from batchmark.runner.results.report import RunReport
from batchmark.runner.results.summary import (
    TERMINATION_MESSAGE_LIMIT,
    fit_summary,
    run_summary,
    summary_json,
    termination_message,
)
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.statusfields import BenchmarkSummary, RunSummary, headline, parse_summary
from tests.unit.observability_data import benchmark, report


def timed_batch(batch_id: int, at: float) -> BatchEvent:
    """Four requests with the engine's own timings, so TTFT and time per output token are reported too."""
    completions = [
        Completion(batch_id * 4 + i, 16, 8, None, EngineTimings(0.001 * i, 0.0123 + i / 1000, 0.3, 0.0133 + i / 977))
        for i in range(4)
    ]
    report = BatchReport(batch_id, True, at, at + 0.01, at + 0.5, completions, 2)
    return BatchEvent(report=report, enqueued=[at - 0.1] * 4, measured=[True] * 4)


def sweep_report(points: int = 10) -> RunReport:
    """A sweep of ``points`` benchmarks with figures of realistic width (many significant digits)."""
    events = [timed_batch(i, at=0.1 * i + 0.0123456789) for i in range(6)]
    benchmarks = [benchmark(events)] + [benchmark(events, label_rate=1.2345678 * (i + 1)) for i in range(points - 1)]
    return report(benchmarks, model="Qwen/Qwen3-0.6B-with-a-rather-long-organisation-and-model-name")


def test_summary_is_camel_case_and_carries_the_headline_figures() -> None:
    full = report_summary = run_summary(sweep_report(2))
    data = json.loads(summary_json(report_summary))
    first = data["results"][0]
    assert set(first) >= {
        "strategy",
        "stopReason",
        "requests",
        "requestsPerSecond",
        "outputTokensPerSecond",
        "latencyP50Seconds",
        "ttftP99Seconds",
        "meanBatchSize",
        "engineUtilization",
    }
    assert data["engine"]["gpuName"]
    assert RunSummary.model_validate(data) == full


def test_a_ten_point_sweep_fits_the_termination_message_with_every_benchmark() -> None:
    sweep = sweep_report(10)
    message = termination_message(sweep)
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    parsed = parse_summary(message)
    assert parsed is not None
    assert len(parsed.results) == 10
    assert parsed.omitted_benchmarks == 0
    # Fewer fields, never cut JSON: the headline throughput and latency are still there for every benchmark.
    assert all(entry.output_tokens_per_second is not None for entry in parsed.results)
    assert all(entry.latency_p50_seconds is not None for entry in parsed.results)
    full = run_summary(sweep)
    assert len(summary_json(full).encode()) > TERMINATION_MESSAGE_LIMIT  # so the test does degrade


def test_the_status_summary_of_a_ten_point_sweep_stays_under_16_kib() -> None:
    assert len(summary_json(run_summary(sweep_report(10))).encode()) < 16 * 1024


def test_a_tight_limit_degrades_to_fewer_fields_then_fewer_benchmarks_keeping_the_ends() -> None:
    full = run_summary(sweep_report(10))
    for limit in (3000, 1500, 700, 300, 120):
        fitted = fit_summary(full, limit)
        text = summary_json(fitted)
        assert len(text.encode()) <= limit
        assert parse_summary(text) == fitted
        assert len(fitted.results) + fitted.omitted_benchmarks == 10
    small = fit_summary(full, 700)
    assert 0 < len(small.results) < 10
    assert small.results[0].strategy == full.results[0].strategy  # the sweep's synchronous end is kept


def test_parse_summary_refuses_what_is_not_a_summary() -> None:
    assert parse_summary("Traceback (most recent call last):\n  boom") is None
    assert parse_summary('{"foo": 1}') is None


def test_an_interrupted_runs_stop_reason_survives_in_the_termination_message() -> None:
    failed = sweep_report(10).model_copy(update={"complete": False, "stop_reason": "the engine failed: CUDA error"})
    parsed = parse_summary(termination_message(failed))
    assert parsed is not None
    assert (parsed.complete, parsed.stop_reason) == (False, "the engine failed: CUDA error")
    assert run_summary(sweep_report(2)).stop_reason is None  # a complete run has none


def test_the_headline_is_the_recommended_point_else_the_fastest() -> None:
    slow = BenchmarkSummary(strategy="throughput x8", batch_size=8, output_tokens_per_second=100.0)
    fast = BenchmarkSummary(strategy="throughput x64", batch_size=64, output_tokens_per_second=400.0)
    within_budget = RunSummary(run_id="r", complete=True, results=[slow, fast], recommended=0)
    chosen = headline(within_budget)
    assert chosen is not None
    assert (chosen.strategy, chosen.batch_size) == ("throughput x8", 8)
    no_recommendation = headline(within_budget.model_copy(update={"recommended": None}))
    assert no_recommendation is not None
    assert no_recommendation.batch_size == 64
    # With benchmarks left out of a shrunk summary the index no longer names an entry of this list.
    shrunk = headline(within_budget.model_copy(update={"omitted_benchmarks": 3}))
    assert shrunk is not None
    assert shrunk.batch_size == 64
    assert headline(RunSummary(run_id="r", complete=False, results=[])) is None
