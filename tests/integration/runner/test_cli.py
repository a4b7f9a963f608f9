"""``batchmark run`` end to end on the simulated engine, as a user runs it."""

from __future__ import annotations

import csv
import importlib.util
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.cli import command, read_results, run_and_load, run_program

pytestmark = pytest.mark.integration

FAST_BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0"
DATA = "kind=synthetic_text,prompt_tokens=256,output_tokens=128"


def test_seed_example_runs_and_writes_every_format(tmp_path: Path) -> None:
    outputs = [tmp_path / "r.json", tmp_path / "r.yaml", tmp_path / "r.csv"]
    finished = run_program(
        [
            "run",
            "--quiet",
            "--backend",
            FAST_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=20",
            "--constraint",
            "kind=max_requests,count=100",
            *[arg for out in outputs for arg in ("--output", str(out))],
        ]
    )
    assert finished.code == 0, finished.stderr
    assert "SIMULATED" in finished.stdout
    report = read_results(outputs[0])
    assert report["engine"]["kind"] == "simulated"
    assert report["engine"]["simulated"] is True
    assert report["complete"] is True
    [benchmark] = report["benchmarks"]
    assert benchmark["requests"] == {"completed": 100, "errored": 0, "incomplete": 0, "excluded": 0}
    assert benchmark["tokens"] == {"prompt": 100 * 256, "output": 100 * 128}
    assert benchmark["stop_reason"] == "max_requests"
    assert benchmark["distributions"]["batch_size"]["max"] == 8
    assert benchmark["distributions"]["output_tokens"]["min"] == 128
    assert benchmark["distributions"]["time_to_first_token"]["count"] == 100
    assert 0 < benchmark["engine_utilization"] <= 1
    assert len(benchmark["samples"]) == 20
    assert yaml.safe_load(outputs[1].read_text())["run_id"] == report["run_id"]
    [row] = list(csv.DictReader(outputs[2].open()))
    assert row["engine"] == "simulated"
    assert int(row["requests.completed"]) == 100
    assert float(row["throughput.output_tokens_per_second"]) == pytest.approx(
        benchmark["throughput"]["output_tokens_per_second"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--backend", "kind=nope,model=m"],
            "--backend: kind: Input should be 'vllm_python_batch', 'vllm_python_async' or 'vllm_python' (got 'nope')",
        ),
        (
            ["--backend", "kind=vllm_python_batch,model=m,engine=simulated,batch_size=0"],
            "--backend: batch_size: Input should be greater than or equal to 1",
        ),
        (["--backend", FAST_BACKEND + ",bogus=1"], "--backend: bogus: unknown key"),
        (["--data", "kind=synthetic_text,prompt_tokens=many,output_tokens=1"], "--data: prompt_tokens"),
        (["--profile", "kind=constant,rate=-2"], "--profile: rate: Input should be greater than 0"),
        (["--constraint", "kind=max_requests,count=x"], "--constraint: 0.count"),
        (["--constraint", "kind=max_errors,count=1"], "so that the run ends"),
        (["--config", "/nonexistent/run.yaml"], "--config: /nonexistent/run.yaml: cannot read it"),
        (["--backend", "kind=vllm_python_batch,model=m,engine=simulated", "--output", "x.txt"], "--output"),
    ],
)
def test_bad_input_exits_2_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    defaults = {
        "--backend": FAST_BACKEND,
        "--data": DATA,
        "--profile": "kind=throughput",
        "--constraint": "kind=max_requests,count=5",
    }
    given = dict(zip(args[::2], args[1::2], strict=True))
    merged = {**defaults, **given} if "--config" not in given else given
    output = tmp_path / "never.json"
    argv = [part for item in merged.items() for part in item] + ["--output", str(output)] * ("--output" not in given)
    finished = run_program(["run", "--quiet", *argv])
    assert finished.code == 2, finished.stderr
    assert message in finished.message
    assert "Traceback" not in finished.stderr
    assert not output.exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_real_engine_without_vllm_stops_at_once_saying_how_to_proceed() -> None:
    started = time.monotonic()
    finished = run_program(
        [
            "run",
            "--quiet",
            "--backend",
            "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8",
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=20",
            "--constraint",
            "kind=max_requests,count=100",
        ]
    )
    assert finished.code == 2
    assert "engine=simulated" in finished.stderr
    assert time.monotonic() - started < 20


def test_config_file_with_command_line_overrides(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "from-file",
                "backend": {
                    "kind": "vllm_python_batch",
                    "model": "m",
                    "engine": "simulated",
                    "batchSize": 4,
                    "simulation": {"timeScale": 0},
                },
                "data": {"kind": "synthetic_text", "promptTokens": 32, "outputTokens": 8},
                "profile": {"kind": "throughput", "maxConcurrency": 8},
                "constraints": [{"kind": "max_requests", "count": 40}],
            }
        )
    )
    report = run_and_load(tmp_path / "out.json", ["--config", str(config), "--backend", "batch_size=2"])
    assert report["name"] == "from-file"
    assert report["config"]["backend"]["batch_size"] == 2
    assert report["config"]["backend"]["model"] == "m"
    assert report["benchmarks"][0]["distributions"]["batch_size"]["max"] == 2
    assert report["benchmarks"][0]["requests"]["completed"] == 40


def test_max_duration_counts_requests_in_flight_as_incomplete(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            "kind=vllm_python_batch,model=m,batch_size=4,engine=simulated",
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=16",
            "--constraint",
            "kind=max_duration,seconds=2",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["stop_reason"] == "max_duration"
    assert benchmark["duration"] == pytest.approx(2.0, abs=0.5)
    assert benchmark["requests"]["incomplete"] > 0
    assert benchmark["requests"]["completed"] > 0
    assert benchmark["measured_duration"] == pytest.approx(2.0, abs=0.01)


def test_min_requests_stops_once_enough_completed(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            FAST_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=64",
            "--constraint",
            "kind=min_requests,count=100",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["stop_reason"] == "min_requests"
    assert benchmark["requests"]["completed"] >= 100
    assert benchmark["requests"]["completed"] < 100 + 64


@pytest.mark.parametrize(
    ("constraint", "reason"),
    [("kind=max_errors,count=5", "max_errors"), ("kind=max_error_rate,rate=0.5,window=10", "max_error_rate")],
)
def test_error_constraints_stop_a_failing_run(tmp_path: Path, constraint: str, reason: str) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            FAST_BACKEND + ",vllm_config.max_model_len=64",
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=8",
            "--constraint",
            constraint,
            "--constraint",
            "kind=max_requests,count=1000",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["stop_reason"] == reason
    assert benchmark["requests"]["completed"] == 0
    assert benchmark["requests"]["errored"] > 5
    error = next(sample["error"] for sample in benchmark["samples"] if sample["error"])
    assert "longer than the maximum model length of 64" in error


def test_warmup_and_cooldown_requests_are_excluded(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            FAST_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=8,warmup.requests=16,cooldown.requests=8",
            "--constraint",
            "kind=max_requests,count=64",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["requests"]["completed"] == 40
    assert benchmark["requests"]["excluded"] == 24


def test_sweep_runs_synchronous_throughput_and_rates_between(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            "kind=vllm_python_batch,model=m,batch_size=8,engine=simulated,simulation.time_scale=0.05",
            "--data",
            "kind=synthetic_text,prompt_tokens=64,output_tokens=16",
            "--profile",
            "kind=sweep,sweep_size=4,max_concurrency=32",
            "--constraint",
            "kind=max_requests,count=48",
        ],
    )
    benchmarks = report["benchmarks"]
    assert [b["kind"] for b in benchmarks] == ["synchronous", "throughput", "constant", "constant"]
    sync_rate = benchmarks[0]["throughput"]["requests_per_second"]
    max_rate = benchmarks[1]["throughput"]["requests_per_second"]
    assert sync_rate < benchmarks[2]["rate"] < benchmarks[3]["rate"] < max_rate
    assert all(b["requests"]["completed"] == 48 for b in benchmarks)


def test_constant_rate_is_kept(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            FAST_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=constant,rate=50",
            "--constraint",
            "kind=max_requests,count=100",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["throughput"]["requests_per_second"] == pytest.approx(50, rel=0.1)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_worker_process_start_methods(tmp_path: Path, context: str) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            FAST_BACKEND,
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=16",
            "--constraint",
            "kind=max_requests,count=32",
        ],
        env={"BATCHMARK_MP_CONTEXT": context},
    )
    assert report["benchmarks"][0]["requests"]["completed"] == 32


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_cleanly_and_keeps_the_results(tmp_path: Path, signum: int, exit_code: int) -> None:
    output = tmp_path / "out.json"
    process = subprocess.Popen(
        command(
            "run",
            "--quiet",
            "--backend",
            "kind=vllm_python_batch,model=m,batch_size=4,engine=simulated",
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=8",
            "--constraint",
            "kind=max_duration,seconds=120",
            "--output",
            str(output),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while (
        "benchmark 1" not in (line := process.stderr.readline() if process.stderr else "")
        and time.monotonic() < deadline
    ):
        assert line or process.poll() is None
    time.sleep(2.0)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == exit_code, stderr
    report = read_results(output)
    assert report["complete"] is False
    [benchmark] = report["benchmarks"]
    assert benchmark["interrupted"] is True
    assert benchmark["stop_reason"] == f"interrupted by {signal.Signals(signum).name}"
    assert benchmark["requests"]["completed"] > 0


def test_warmup_seconds_are_left_out_of_the_window(tmp_path: Path) -> None:
    report = run_and_load(
        tmp_path / "out.json",
        [
            "--backend",
            "kind=vllm_python_batch,model=m,batch_size=4,engine=simulated",
            "--data",
            "kind=synthetic_text,prompt_tokens=64,output_tokens=16",
            "--profile",
            "kind=constant,rate=20,warmup.seconds=1",
            "--constraint",
            "kind=max_duration,seconds=3",
        ],
    )
    [benchmark] = report["benchmarks"]
    assert benchmark["measured_duration"] == pytest.approx(2.0, abs=0.01)
    assert benchmark["requests"]["excluded"] >= 15
    assert benchmark["throughput"]["requests_per_second"] == pytest.approx(20, rel=0.15)
