"""The over_saturation constraint on the simulated engine: a rate above what it serves is stopped and said so, a
rate below it runs to its end. The engine's capacity is set by its cost model: 10 ms steps, 2 sequences at a
time, 10 output tokens each (11 steps a request): about 18 requests a second."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_and_load
from tests.integration.runner.harness import batchmark

pytestmark = pytest.mark.integration

SLOW_ENGINE = {
    "kind": "vllm_python_async",
    "model": "sim",
    "engine": "simulated",
    "vllm_config": {"max_num_seqs": 2},
    "simulation": {"time_scale": 1.0, "step_fixed_seconds": 0.01, "batched_token_seconds": 0.0},
}
WATCH = {"kind": "over_saturation", "seconds": 3.0, "segments": 6}


def run_at(tmp_path: Path, rate: float, seconds: float) -> Any:
    config = {
        "backend": SLOW_ENGINE,
        "data": {"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 10},
        "profile": {"kind": "constant", "rate": rate},
        "constraints": [{"kind": "max_duration", "seconds": seconds}, WATCH],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return run_and_load(tmp_path / "report.json", ["--config", str(path)], in_process=True)


def test_a_rate_above_capacity_is_stopped_and_the_results_say_why(tmp_path: Path) -> None:
    report = run_at(tmp_path, rate=40, seconds=30)
    [result] = report["benchmarks"]
    assert result["stop_reason"] == "over_saturation"
    assert result["duration"] < 10  # the 3 s window, then a check per half second: far short of 30 s
    check = result["saturation"]
    assert check["saturated"] is True
    assert check["in_flight_p"] < 0.005
    assert check["latency_p"] < 0.005
    assert check["in_flight_last"] > check["in_flight_first"]
    assert result["requests"]["completed"] > 0


def test_a_rate_below_capacity_runs_to_its_end(tmp_path: Path) -> None:
    report = run_at(tmp_path, rate=5, seconds=8)
    [result] = report["benchmarks"]
    assert result["stop_reason"] == "max_duration"
    assert result["saturation"]["saturated"] is False


def test_the_constraint_needs_a_rate_profile(tmp_path: Path) -> None:
    outcome = batchmark(
        tmp_path,
        [
            "run",
            "--backend",
            "kind=vllm_python_batch,model=m,engine=simulated",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            "kind=throughput,max_concurrency=4",
            "--constraint",
            "kind=max_requests,count=5",
            "--constraint",
            "kind=over_saturation",
        ],
    )
    assert outcome.code == 2
    assert "Traceback" not in outcome.stderr
    [line] = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert "over_saturation judges a rate" in line
