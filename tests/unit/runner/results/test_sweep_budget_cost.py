"""Sweep configuration, the latency budget (targets, verdicts, goodput, recommendation) and cost arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from batchmark.runner.cli import build_parser
from batchmark.runner.config.base import MAX_SWEEP_BENCHMARKS
from batchmark.runner.config.cost import CostConfig
from batchmark.runner.config.load import UsageError, load_config
from batchmark.runner.config.run import RunConfig
from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.config.spec import SpecError, parse_sweep
from batchmark.runner.config.sweep import SweepConfig
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.engines.base import Completion, EngineTimings
from batchmark.runner.results.budget import RequestBudget, recommend, verdict
from batchmark.runner.results.cost import gpu_count, price
from batchmark.runner.results.report import BenchmarkResult, Goodput, SloVerdict, Throughput
from batchmark.runner.run.aggregator import Aggregator, Window
from batchmark.runner.run.events import BatchEvent
from batchmark.runner.run.profiles import Strategy

BASE: dict[str, Any] = {
    "backend": {"model": "m", "engine": "simulated"},
    "data": {"prompt_tokens": 16, "output_tokens": 8},
    "profile": {"kind": "throughput"},
    "constraints": [{"kind": "max_requests", "count": 10}],
}


def config(**extra: Any) -> RunConfig:
    return RunConfig.model_validate({**BASE, **extra})


# --- sweep configuration ---


def test_points_vary_engine_fields_slowest_and_keep_value_order() -> None:
    sweep = SweepConfig.model_validate({"batch_size": [8, 2, 4], "vllm_config": {"max_num_seqs": [64, 128]}})
    assert [name for name, _ in sweep.axes()] == ["vllm_config.max_num_seqs", "batch_size"]
    assert sweep.points() == [
        {"vllm_config.max_num_seqs": 64, "batch_size": 8},
        {"vllm_config.max_num_seqs": 64, "batch_size": 2},
        {"vllm_config.max_num_seqs": 64, "batch_size": 4},
        {"vllm_config.max_num_seqs": 128, "batch_size": 8},
        {"vllm_config.max_num_seqs": 128, "batch_size": 2},
        {"vllm_config.max_num_seqs": 128, "batch_size": 4},
    ]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({}, "at least one backend field"),
        ({"batch_size": [8, 8]}, "given twice"),
        ({"batch_size": [0]}, "greater than or equal to 1"),
        ({"batch_size": [1], "batch_timeout": [0.1], "dispatch": ["batch"]}, "at most 2 fields"),
        ({"batch_size": [1], "color": [1]}, "Extra inputs are not permitted"),
        ({"vllm_config": {"max_num_seqs": []}}, "at least one value"),
        ({"dispatch": ["sideways"]}, "'batch' or 'continuous'"),
    ],
)
def test_bad_sweeps_are_refused(sweep: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(sweep=sweep)


def test_the_product_with_a_sweep_profile_is_bounded() -> None:
    config(sweep={"batch_size": [1, 2, 4, 8, 16, 32, 64, 128]}, profile={"kind": "sweep", "sweep_size": 8})
    with pytest.raises(ValidationError, match=f"= 90 benchmarks, more than the limit of {MAX_SWEEP_BENCHMARKS}"):
        config(sweep={"batch_size": [1, 2, 4, 8, 16, 32, 64, 128, 256]}, profile={"kind": "sweep", "sweep_size": 10})


def test_swept_values_obey_the_backend_fields_bounds() -> None:
    with pytest.raises(ValidationError, match="batch_timeout"):
        config(sweep={"batch_timeout": [0.01, -1]})


def test_sweep_option_syntax() -> None:
    assert parse_sweep("batch_size=8,16,32") == {"batch_size": [8, 16, 32]}
    assert parse_sweep("batch_size=[8, 16]") == {"batch_size": [8, 16]}
    assert parse_sweep("vllm_config.max_num_seqs=64,128") == {"vllm_config": {"max_num_seqs": [64, 128]}}
    assert parse_sweep("dispatch=batch,continuous") == {"dispatch": ["batch", "continuous"]}
    assert parse_sweep('{"batch_size": [1, 2]}') == {"batch_size": [1, 2]}
    for bad in ("batch_size", "=1,2", "batch_size="):
        with pytest.raises(SpecError):
            parse_sweep(bad)


def cli_config(*options: str, backend: str = "kind=vllm_python_batch,model=m,engine=simulated") -> RunConfig:
    args = build_parser().parse_args(
        [
            "run",
            "--backend",
            backend,
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            "kind=throughput",
            "--constraint",
            "kind=max_requests,count=10",
            *options,
        ]
    )
    return load_config(args)


def test_cli_sweep_slo_and_cost_options() -> None:
    loaded = cli_config(
        "--sweep",
        "batch_size=8,16",
        "--sweep",
        "vllm_config.max_num_seqs=32,64",
        "--sweep-warmup",
        "4",
        "--slo",
        "request_latency_p99=2.0,ttft_p95=0.5",
        "--gpu-cost-per-hour",
        "2.5",
    )
    assert loaded.sweep is not None
    assert loaded.sweep.batch_size == [8, 16]
    assert loaded.sweep.vllm_config == {"max_num_seqs": [32, 64]}
    assert loaded.sweep.warmup_requests == 4
    assert loaded.slo == {"request_latency_p99": 2.0, "ttft_p95": 0.5}
    assert loaded.cost == CostConfig(gpu_cost_per_hour=2.5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--sweep", "batch_size"), "--sweep: 'batch_size' is not FIELD=VALUE"),
        (("--sweep", "batch_size=0,1"), "--sweep: batch_size.0"),
        (("--slo", "latency_p99=1"), "--slo: 'latency_p99' is not DISTRIBUTION_STATISTIC"),
        (("--slo", "ttft_p95=0"), "positive number"),
        (("--gpu-cost-per-hour", "0"), "--gpu-cost-per-hour: gpu_cost_per_hour"),
    ],
)
def test_cli_refuses_bad_sweeps_budgets_and_prices(options: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        cli_config(*options)
    assert message in str(caught.value)


def test_help_states_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert f"At most {MAX_SWEEP_BENCHMARKS} benchmarks in all" in " ".join(capsys.readouterr().out.split())


# --- the budget ---


def test_slo_names() -> None:
    assert parse_slo_name("request_latency_p99") == ("request_latency", "p99")
    assert parse_slo_name("ttft_p95") == ("time_to_first_token", "p95")
    assert parse_slo_name("tpot_p50") == ("time_per_output_token", "median")
    assert parse_slo_name("queue_wait_max") == ("queue_wait", "max")
    for bad in ("latency_p99", "ttft_p42", "ttft", "batch_size_p99"):
        with pytest.raises(ValueError, match="DISTRIBUTION_STATISTIC"):
            parse_slo_name(bad)


def vllm_config_of(run: RunConfig) -> list[dict[str, Any]]:
    points = run.sweep.points() if run.sweep is not None else [{}]
    return [run.point_backend(point).vllm_config for point in points]


def test_an_slo_on_ttft_or_tpot_turns_vllms_per_request_stats_on_and_nothing_else_does() -> None:
    vllm = {"model": "m", "engine": "vllm", "vllm_config": {"max_model_len": 64}}
    # Without such a target the engine runs as vllm.LLM does (stats off): vllm_config is passed as written.
    assert vllm_config_of(config(backend=vllm)) == [{"max_model_len": 64}]
    assert vllm_config_of(config(backend=vllm, slo={"request_latency_p99": 1.0})) == [{"max_model_len": 64}]
    for target in ("ttft_p95", "tpotP99", "time_to_first_token_max"):
        assert vllm_config_of(config(backend=vllm, slo={target: 1.0})) == [
            {"max_model_len": 64, "disable_log_stats": False}
        ]
    # Every point of a sweep loads its engine with them; the user's own setting is kept as written.
    swept = config(backend=vllm, slo={"ttft_p95": 1.0}, sweep={"vllm_config": {"max_num_seqs": [4, 8]}})
    assert vllm_config_of(swept) == [
        {"max_model_len": 64, "max_num_seqs": 4, "disable_log_stats": False},
        {"max_model_len": 64, "max_num_seqs": 8, "disable_log_stats": False},
    ]
    explicit = {**vllm, "vllm_config": {"disable_log_stats": False}}
    assert vllm_config_of(config(backend=explicit, slo={"ttft_p95": 1.0})) == [{"disable_log_stats": False}]
    # The user's config itself is left as written (the report echoes it).
    assert config(backend=vllm, slo={"ttft_p95": 1.0}).backend.vllm_config == {"max_model_len": 64}


def test_an_slo_on_ttft_or_tpot_is_refused_where_vllm_config_turns_the_stats_off() -> None:
    stats_off = {"model": "m", "engine": "vllm", "vllm_config": {"disable_log_stats": True}}
    with pytest.raises(ValidationError, match=r"ttft_p95 needs vLLM's per-request stats.*disable_log_stats=true"):
        config(backend=stats_off, slo={"request_latency_p99": 1.0, "ttft_p95": 1.0})
    swept_off = {"vllm_config": {"disable_log_stats": [False, True]}}
    with pytest.raises(ValidationError, match=r"tpot_p50 needs vLLM's per-request stats"):
        config(backend={"model": "m", "engine": "vllm"}, slo={"tpot_p50": 1.0}, sweep=swept_off)
    # A budget that needs no engine timestamps is accepted; the simulated engine honours the setting as vLLM does.
    config(backend=stats_off, slo={"request_latency_p99": 1.0})
    with pytest.raises(ValidationError, match=r"ttft_p95 needs vLLM's per-request stats"):
        config(backend={**stats_off, "engine": "simulated"}, slo={"ttft_p95": 1.0})
    config(backend={"model": "m", "engine": "simulated"}, slo={"ttft_p95": 1.0})
    with pytest.raises(UsageError, match=r"^--slo: ttft_p95 needs vLLM's per-request stats"):
        cli_config("--slo", "ttft_p95=1", backend="model=m,engine=vllm,vllm_config.disable_log_stats=true")


def test_request_budget_takes_the_tightest_target_and_fails_missing_values() -> None:
    budget = RequestBudget({"request_latency_p99": 2.0, "request_latency_p50": 1.0, "ttft_p95": 0.5})
    assert budget.limits == {"request_latency": 1.0, "time_to_first_token": 0.5}
    assert budget.meets({"request_latency": 1.0, "time_to_first_token": 0.5})
    assert not budget.meets({"request_latency": 1.01, "time_to_first_token": 0.1})
    assert not budget.meets({"request_latency": 0.5, "time_to_first_token": math.nan})
    assert not RequestBudget({})


def aggregate(
    latencies: list[float], budget: RequestBudget, output_tokens: int = 10
) -> tuple[BenchmarkResult, Aggregator]:
    """One request per batch, each enqueued at 0 and finished at its latency; TTFT is a tenth of it."""
    aggregator = Aggregator(0.0, 0.0, 0, Window(), 0, budget)
    for request_id, latency in enumerate(latencies):
        aggregator.on_issue(request_id, 0.0)
        timings = EngineTimings(0.0, latency / 10, latency * 0.9, latency / 10)
        report = BatchReport(
            request_id, True, 0.0, 0.0, latency, [Completion(request_id, 5, output_tokens, None, timings)], 0
        )
        aggregator.on_batch(BatchEvent(report, [0.0], [True]))
    result = aggregator.finish(
        end=max(latencies),
        stop_reason="max_requests",
        incomplete=0,
        interrupted=False,
        strategy=Strategy("throughput", 4),
    )
    return result, aggregator


def test_verdict_and_goodput_on_a_known_distribution() -> None:
    latencies = [float(value) for value in range(1, 101)]  # 1..100 s; the window runs from 0 to 100 s
    slo = {"request_latency_p50": 60.0, "ttft_p99": 20.0}
    result, aggregator = aggregate(latencies, RequestBudget(slo))
    # Per request: latency <= 60 and TTFT (latency / 10) <= 20 -> the 60 requests of 1..60 s.
    assert aggregator.good_requests == 60
    assert aggregator.good_output_tokens == 600
    judged = verdict(slo, result, aggregator.good_requests, aggregator.good_output_tokens)
    targets = {target.name: target for target in judged.targets}
    assert targets["request_latency_p50"].observed == pytest.approx(50.5)
    assert targets["request_latency_p50"].met
    assert targets["ttft_p99"].observed == pytest.approx(9.901)
    assert targets["ttft_p99"].met
    assert judged.met
    assert result.measured_duration == pytest.approx(100.0)
    assert judged.goodput.requests_per_second == pytest.approx(60 / 100.0)
    assert judged.goodput.output_tokens_per_second == pytest.approx(600 / 100.0)
    strict = verdict({"request_latency_p99": 50.0}, result, 0, 0)
    assert not strict.met
    assert strict.targets[0].observed == pytest.approx(99.01)


def benchmark(rate: float, met: bool | None, batch_size: int) -> BenchmarkResult:
    result, _ = aggregate([1.0, 2.0], RequestBudget({}))
    update: dict[str, Any] = {
        "throughput": Throughput(
            requests_per_second=1,
            output_tokens_per_second=rate,
            prompt_tokens_per_second=1,
            total_tokens_per_second=rate,
        ),
        "swept": {"batch_size": batch_size},
    }
    if met is not None:
        update["slo"] = SloVerdict(
            met=met, targets=[], goodput=Goodput(requests=0, requests_per_second=0, output_tokens_per_second=0)
        )
    return result.model_copy(update=update)


def test_recommendation_is_the_fastest_that_met_the_budget_with_its_margin() -> None:
    results = [benchmark(100, True, 8), benchmark(300, False, 16), benchmark(200, True, 32), benchmark(150, True, 64)]
    chosen = recommend(results, budget=True)
    assert chosen is not None
    assert (chosen.benchmark, chosen.runner_up, chosen.swept) == (2, 3, {"batch_size": 32})
    assert chosen.margin == pytest.approx(200 / 150 - 1)
    assert "batch_size=32" in chosen.statement
    assert "+33.3% over the next best" in chosen.statement
    unbudgeted = recommend([benchmark(100, None, 8), benchmark(300, None, 16)], budget=False)
    assert unbudgeted is not None
    assert unbudgeted.benchmark == 1
    assert "no latency budget given" in unbudgeted.statement


def test_no_point_met_the_budget_is_said_plainly() -> None:
    chosen = recommend([benchmark(100, False, 8), benchmark(300, False, 16)], budget=True)
    assert chosen is not None
    assert chosen.benchmark is None
    assert not chosen.met_budget
    assert chosen.statement.startswith("No benchmark met the latency budget; none is recommended.")
    assert "batch_size=16" in chosen.statement


# --- cost ---


def test_cost_per_million_tokens() -> None:
    throughput = Throughput(
        requests_per_second=1,
        output_tokens_per_second=1000,
        prompt_tokens_per_second=3000,
        total_tokens_per_second=4000,
    )
    # 2 GPUs at 3.6 per hour = 0.002 per second; 1000 output tokens/s -> 2.0 per million, 4000 total -> 0.5.
    figures = price(CostConfig(gpu_cost_per_hour=3.6), {"tensor_parallel_size": 2}, throughput)
    assert figures.gpus == 2
    assert figures.per_million_output_tokens == pytest.approx(2.0)
    assert figures.per_million_total_tokens == pytest.approx(0.5)
    assert gpu_count(CostConfig(gpu_cost_per_hour=1), {"tensor_parallel_size": 2, "pipeline_parallel_size": 3}) == 6
    assert gpu_count(CostConfig(gpu_cost_per_hour=1, gpus=8), {"tensor_parallel_size": 2}) == 8
    assert gpu_count(CostConfig(gpu_cost_per_hour=1), {}) == 1
    idle = throughput.model_copy(update={"output_tokens_per_second": 0.0})
    assert price(CostConfig(gpu_cost_per_hour=1), {}, idle).per_million_output_tokens is None
