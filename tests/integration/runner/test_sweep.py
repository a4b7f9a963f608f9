"""Sweeps on the simulated engine through the real worker process: order, one load, reloads, grids, budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner.config.run import RunConfig
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.observe.pushgateway import results_registry
from batchmark.runner.results.report import RunReport
from batchmark.runner.results.summary import run_summary, termination_message
from batchmark.runner.run.benchmark import BenchmarkRunner
from batchmark.runner.run.events import RunObserver
from batchmark.runner.statusfields import headline
from tests.cli import run_in_process

pytestmark = pytest.mark.integration

BACKEND: dict[str, Any] = {
    "model": "m",
    "engine": "simulated",
    "batch_timeout": 0.005,
    "simulation": {"time_scale": 0.2},
}


class Recorder(RunObserver):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        self.events.append(("loaded", info.details["max_num_seqs"]))

    def on_sweep_point(self, values: dict[str, Any], position: int, total: int) -> None:
        self.events.append(("point", position, total, dict(values)))


def run(sweep: dict[str, Any], requests: int = 64, **extra: Any) -> tuple[RunReport, Recorder]:
    config = RunConfig.model_validate(
        {
            "backend": {**BACKEND, **extra.pop("backend", {})},
            "data": {"prompt_tokens": 32, "output_tokens": 8},
            "profile": extra.pop("profile", {"kind": "throughput", "max_concurrency": 64}),
            "constraints": extra.pop("constraints", [{"kind": "max_requests", "count": requests}]),
            "sweep": sweep,
            **extra,
        }
    )
    recorder = Recorder()
    runner = BenchmarkRunner(config, [recorder])
    runner.check()
    try:
        runner.start()
        report = runner.run()
    finally:
        runner.close()
    return report, recorder


def test_a_batch_size_sweep_runs_in_order_on_one_engine_load() -> None:
    report, recorder = run({"batch_size": [16, 2, 8]})
    assert [b.swept for b in report.benchmarks] == [{"batch_size": 16}, {"batch_size": 2}, {"batch_size": 8}]
    assert [b.batch_size for b in report.benchmarks] == [16, 2, 8]
    # The engine was loaded once, before the first point; the points followed on the same worker.
    assert [event[0] for event in recorder.events] == ["loaded", "point", "point", "point"]
    assert report.sweep is not None
    [load] = report.sweep.engine_loads
    assert load.pid is not None
    assert load.first_benchmark == 0
    for benchmark in report.benchmarks:
        assert benchmark.requests.completed == 64
        # The worker batched by each point's size: no batch larger, and the full size reached under load.
        sizes = [size for size, _ in benchmark.batch_size_histogram]
        assert max(sizes) == benchmark.batch_size
    assert report.sweep.timed_seconds == pytest.approx(sum(b.duration for b in report.benchmarks))
    assert report.sweep.wall_seconds >= report.sweep.timed_seconds
    assert report.sweep.load_seconds == 0
    assert report.recommendation is not None
    assert report.recommendation.benchmark is not None


def test_an_engine_field_reloads_the_engine_between_its_values_only() -> None:
    report, recorder = run({"vllm_config": {"max_num_seqs": [4, 32]}, "batch_size": [8, 16]})
    assert [b.swept for b in report.benchmarks] == [
        {"vllm_config.max_num_seqs": 4, "batch_size": 8},
        {"vllm_config.max_num_seqs": 4, "batch_size": 16},
        {"vllm_config.max_num_seqs": 32, "batch_size": 8},
        {"vllm_config.max_num_seqs": 32, "batch_size": 16},
    ]
    assert [event[0] if event[0] == "point" else event for event in recorder.events] == [
        ("loaded", 4),
        "point",
        "point",
        ("loaded", 32),
        "point",
        "point",
    ]
    assert report.sweep is not None
    first, second = report.sweep.engine_loads
    assert first.swept == {"vllm_config.max_num_seqs": 4}
    assert second.swept == {"vllm_config.max_num_seqs": 32}
    assert (first.first_benchmark, second.first_benchmark) == (0, 2)
    assert first.pid != second.pid  # a new worker with a new engine
    assert report.sweep.load_seconds == pytest.approx(second.load_seconds)
    # The load is outside every timed phase, and the sweep's wall time holds both.
    assert report.sweep.wall_seconds >= report.sweep.timed_seconds + report.sweep.load_seconds


def test_a_grid_of_dispatch_and_batch_size_with_a_warm_up_per_point_and_a_duration_bound() -> None:
    report, recorder = run(
        {"dispatch": ["batch", "continuous"], "batch_size": [4, 12], "warmup_requests": 6},
        constraints=[{"kind": "max_duration", "seconds": 0.4}],
    )
    assert [b.swept for b in report.benchmarks] == [
        {"batch_size": 4, "dispatch": "batch"},
        {"batch_size": 4, "dispatch": "continuous"},
        {"batch_size": 12, "dispatch": "batch"},
        {"batch_size": 12, "dispatch": "continuous"},
    ]
    assert sum(event[0] == "loaded" for event in recorder.events) == 1
    for benchmark in report.benchmarks:
        assert benchmark.stop_reason == "max_duration"
        assert benchmark.requests.completed > 0
        assert benchmark.batch_size is not None
        assert max(size for size, _ in benchmark.batch_size_histogram) <= benchmark.batch_size


def test_a_sweep_profile_runs_whole_at_each_point() -> None:
    report, _ = run({"batch_size": [4, 16]}, requests=40, profile={"kind": "sweep", "sweep_size": 3})
    assert [(b.kind, b.swept["batch_size"]) for b in report.benchmarks] == [
        ("synchronous", 4),
        ("throughput", 4),
        ("constant", 4),
        ("synchronous", 16),
        ("throughput", 16),
        ("constant", 16),
    ]


def test_warm_up_requests_stay_out_of_the_results() -> None:
    report, _ = run({"batch_size": [4, 8], "warmup_requests": 10}, requests=20)
    for benchmark in report.benchmarks:
        assert benchmark.requests.completed == 20
        assert benchmark.requests.excluded == 0
        assert benchmark.tokens["output"] == 20 * 8


def test_budget_goodput_cost_and_recommendation_through_the_cli(tmp_path: Path) -> None:
    results = tmp_path / "sweep.json"
    csv = tmp_path / "sweep.csv"
    finished = run_in_process(
        [
            "run",
            "--quiet",
            "--backend",
            "kind=vllm_python_batch,model=m,engine=simulated,simulation.time_scale=0.2,batch_timeout=0.005",
            "--data",
            "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
            "--profile",
            "kind=throughput,max_concurrency=64",
            "--constraint",
            "kind=max_requests,count=64",
            "--sweep",
            "batch_size=1,4,16",
            "--slo",
            "request_latency_p99=30,ttft_p95=30",
            "--gpu-cost-per-hour",
            "3.6",
            "--gpus",
            "2",
            "--output",
            str(results),
            "--output",
            str(csv),
        ]
    )
    assert finished.code == 0, finished.stderr
    printed = finished.stdout
    report = json.loads(results.read_text())
    for benchmark in report["benchmarks"]:
        assert benchmark["slo"]["met"] is True  # a generous budget: every request meets it
        assert benchmark["slo"]["goodput"]["requests"] == 64
        assert benchmark["slo"]["goodput"]["output_tokens_per_second"] == pytest.approx(
            benchmark["throughput"]["output_tokens_per_second"]
        )
        assert benchmark["cost"]["gpus"] == 2
        assert benchmark["cost"]["per_million_output_tokens"] == pytest.approx(
            0.002 / benchmark["throughput"]["output_tokens_per_second"] * 1e6
        )
    best = max(range(3), key=lambda index: report["benchmarks"][index]["throughput"]["output_tokens_per_second"])
    assert report["recommendation"]["benchmark"] == best
    assert "Recommended: throughputx64 (batch_size=" in printed
    assert "one engine load for every point" in printed
    assert "latency budget and cost" in printed
    header, *rows = csv.read_text().splitlines()
    columns = header.split(",")
    assert "swept.batch_size" in columns
    assert "slo.met" in columns
    assert "slo.goodput.output_tokens_per_second" in columns
    assert "slo.targets.request_latency_p99.observed" in columns
    assert "cost.per_million_output_tokens" in columns
    assert [row.split(",")[columns.index("swept.batch_size")] for row in rows] == ["1", "4", "16"]


def test_repeats_interleave_the_points_on_one_load_and_report_intervals(tmp_path: Path) -> None:
    report, recorder = run(
        {"batch_size": [2, 16]},
        repeats=3,
        slo={"request_latency_p99": 60.0},
        cost={"gpu_cost_per_hour": 2.0},
        backend={"simulation": {"time_scale": 0.2, "step_time_noise": 0.2, "noise_seed": 5}},
    )
    # Every repeat is kept, in rounds: both points once per round, never one point's repeats back to back.
    assert len(report.benchmarks) == 6
    rounds = [(b.repeat, b.point) for b in report.benchmarks]
    assert [repeat for repeat, _ in rounds] == [0, 0, 1, 1, 2, 2]
    assert all({point for repeat, point in rounds if repeat == r} == {0, 1} for r in range(3))
    assert [event[0] for event in recorder.events].count("loaded") == 1
    assert report.repeats == 3
    assert report.repeated is not None
    assert [entry.swept for entry in report.repeated] == [{"batch_size": 2}, {"batch_size": 16}]
    for entry in report.repeated:
        figure = entry.output_tokens_per_second
        assert figure.count == 3
        assert figure.low is not None
        assert figure.high is not None
        assert 0 < figure.low <= figure.mean <= figure.high
        assert figure.interval_method == "t interval on log values (geometric mean, back-transformed)"
        assert entry.slo == "met"
        assert entry.cost_per_million_output_tokens is not None
        assert set(entry.latency) == {"request_latency_p99"}
    chosen = report.recommendation
    assert chosen is not None
    assert chosen.certainty in ("distinguishable", "tied")
    assert chosen.test == "Welch's t-test"
    assert "95% CI" in chosen.statement
    # The status's headline: the recommended point's mean and interval over its repeats.
    assert chosen.repeated is not None
    figure = report.repeated[chosen.repeated].output_tokens_per_second
    top = headline(run_summary(report))
    assert top is not None
    assert top.repeats == 3
    assert top.certainty == chosen.certainty
    assert top.output_tokens_per_second == pytest.approx(figure.mean, rel=1e-5)
    assert top.output_tokens_per_second_low == pytest.approx(figure.low, rel=1e-5)
    assert len(termination_message(report).encode()) <= 4096
    assert [entry.repeat for entry in run_summary(report).results] == [0, 0, 1, 1, 2, 2]
    assert_pushed_with_intervals(report, str(chosen.swept["batch_size"]))


def assert_pushed_with_intervals(report: RunReport, chosen_size: str) -> None:
    """The push: one label set per point, with the mean, the interval and the recommended mark on all repeats."""
    assert report.repeated is not None
    registry = results_registry("bench", report)
    sizes = {"2": report.repeated[0], "16": report.repeated[1]}
    for size, entry in sizes.items():
        labels = {"strategy": entry.strategy, "batch_size": size, "swept": ""}
        assert registry.get_sample_value("batchmark_result_output_tokens_per_second", labels) == pytest.approx(
            entry.output_tokens_per_second.mean
        )
        assert registry.get_sample_value("batchmark_result_repeats", labels) == 3
        interval = "batchmark_result_output_tokens_per_second_interval"
        low = registry.get_sample_value(interval, {**labels, "bound": "low"})
        assert low == pytest.approx(entry.output_tokens_per_second.low)
        for figure_name in (
            "requests_per_second",
            "output_tokens_per_second",
            "total_tokens_per_second",
            "goodput_output_tokens_per_second",
            "cost_per_million_output_tokens",
        ):
            pushed = getattr(entry, figure_name)
            for bound in ("low", "high"):
                value = registry.get_sample_value(
                    "batchmark_result_interval", {**labels, "figure": figure_name, "bound": bound}
                )
                assert value is not None
                assert value == pytest.approx(getattr(pushed, bound))
                assert value > 0
        goodput = registry.get_sample_value("batchmark_result_goodput_output_tokens_per_second", labels)
        assert entry.goodput_output_tokens_per_second is not None
        assert goodput == pytest.approx(entry.goodput_output_tokens_per_second.mean)
        assert registry.get_sample_value("batchmark_result_recommended", labels) == (1 if size == chosen_size else 0)


def test_repeats_in_the_files_and_on_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A terminal as wide as people's: at rich's default 80 columns off a terminal, the repeats table's headers
    # wrap, and where they break depends on the widths of the figures.
    monkeypatch.setenv("COLUMNS", "200")
    outputs = [tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.yaml", tmp_path / "r.html"]
    finished = run_in_process(
        [
            "run",
            "--backend",
            "kind=vllm_python_batch,model=m,engine=simulated,simulation.time_scale=0.2,batch_timeout=0.005",
            "--data",
            "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
            "--profile",
            "kind=throughput,max_concurrency=32",
            "--constraint",
            "kind=max_requests,count=32",
            "--sweep",
            "batch_size=4,16",
            "--repeats",
            "2",
            *(option for path in outputs for option in ("--output", str(path))),
        ]
    )
    assert finished.code == 0, finished.stderr
    console = " ".join(finished.stdout.split())
    assert "over 2 repeats: mean [95% confidence interval, t on log values]" in console
    assert "total tok/s" in console
    assert "warning: only 2 repeats of some benchmarks" in console
    saved = RunReport.model_validate(json.loads(outputs[0].read_text()))
    assert saved.repeated is not None
    assert len(saved.repeated) == 2
    assert saved.repeats_warning is not None
    assert saved.repeats_warning.startswith("warning: only 2 repeats")
    for entry in saved.repeated:
        for figure in (entry.output_tokens_per_second, entry.total_tokens_per_second, entry.requests_per_second):
            assert figure.low is not None
            assert figure.low > 0
    header = outputs[1].read_text().splitlines()[0].split(",")
    assert {"repeat", "point", "repeated.output_tokens_per_second.low"} <= set(header)
    assert "repeated:" in outputs[2].read_text()
    # The HTML report: each point once, at its mean, with its interval as an error bar.
    page = outputs[3].read_text()
    assert page.count('<g class="error-bar">') == 4  # two points, throughput and latency
    assert "(mean, 95% CI)" in page
    assert '<table id="repeats">' in page
    assert "warning: only 2 repeats of some benchmarks" in page


def test_batch_size_auto_finds_the_full_lists_best_in_at_most_half_the_points() -> None:
    settings: dict[str, Any] = {
        "requests": 512,
        "profile": {"kind": "throughput", "max_concurrency": 512},
        # Decode steps lengthen with the batch (3 us a token and 37 ns a token of context on top of 4 ms, scaled
        # by 0.05): a batch of 16 decodes in 0.2035 ms a step, one of 32 in 0.2069 ms. The time per output token
        # comes from the engine's modelled timestamps, never the machine's clock, so the budget's boundary is
        # 16 however busy the machine. Below it, throughput doubles with each doubling of the batch (the steps'
        # sleeps dominate, and the harness's per-batch cost favours bigger batches too): 16 is the best by a
        # margin that no load on the machine closes. (A boundary at 128 or 256, where the harness's per-request
        # cost flattens throughput to within a few percent, made the best depend on the machine's speed.)
        "slo": {"tpot_p50": 0.000205},
        "backend": {"simulation": {"time_scale": 0.05}},
    }
    full, _ = run({"batch_size": [2**power for power in range(10)]}, **settings)
    searched, recorder = run({"batch_size": "auto"}, **settings)
    assert full.recommendation is not None
    assert searched.recommendation is not None
    best = full.recommendation.swept["batch_size"]
    assert best == 16  # the budget's boundary, inside the range: the search has work to do
    assert searched.recommendation.swept["batch_size"] == best
    assert searched.sweep is not None
    search = searched.sweep.search
    assert search is not None
    assert search.candidates == [2**power for power in range(10)]
    assert search.best == best
    assert len(search.visited) <= len(search.candidates) // 2
    assert [b.batch_size for b in searched.benchmarks] == search.visited
    assert [event[0] for event in recorder.events].count("loaded") == 1


def test_batch_size_auto_interleaves_its_repeats() -> None:
    searched, _ = run({"batch_size": "auto:8-64"}, requests=64, repeats=3)
    assert searched.sweep is not None
    search = searched.sweep.search
    assert search is not None
    visited = len(search.visited)
    assert visited >= 2
    # The search measures each point once, then every point it visited once per round: no point's repeats run
    # back to back within a round.
    repeats = [(benchmark.repeat, benchmark.batch_size) for benchmark in searched.benchmarks]
    assert [batch for repeat, batch in repeats[:visited] if repeat == 0] == search.visited
    for round_number in (1, 2):
        start = visited * round_number
        assert [repeat for repeat, _ in repeats[start : start + visited]] == [round_number] * visited
        assert sorted(batch or 0 for _, batch in repeats[start : start + visited]) == sorted(search.visited)
    assert searched.repeated is not None
    assert all(entry.output_tokens_per_second.count == 3 for entry in searched.repeated)
    assert search.best in search.visited
    assert searched.recommendation is not None
    assert searched.recommendation.certainty in ("distinguishable", "tied")
