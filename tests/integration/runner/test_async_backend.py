"""The async backend (kind=vllm_python_async) on the simulated engine, through the CLI and the engine worker: each
request streamed, its first token and every interval between tokens read on the stream.

The same backend drives the real vLLM engine (``AsyncLLM``) in tests/integration/vllm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_and_load
from tests.integration.runner.harness import backend, batchmark

pytestmark = pytest.mark.integration


def run_cli(tmp_path: Path, backend_settings: dict[str, Any], data: dict[str, Any], count: int, profile: Any) -> Any:
    config = {
        "backend": {"kind": "vllm_python_async", "model": "sim", "engine": "simulated", **backend_settings},
        "data": {"kind": "synthetic_text", **data},
        "profile": profile,
        "constraints": [{"kind": "max_requests", "count": count}],
        "sample_requests": count,
    }
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    return run_and_load(tmp_path / "report.json", ["--config", str(config_path)], in_process=True)


def test_every_output_token_after_the_first_is_an_interval_on_the_stream(tmp_path: Path) -> None:
    report = run_cli(
        tmp_path,
        {"simulation": {"time_scale": 0.0}},
        {"prompt_tokens": 64, "output_tokens": 24, "output_tokens_stdev": 8, "output_tokens_min": 2},
        count=200,
        profile={"kind": "throughput", "max_concurrency": 32},
    )
    assert report["dispatch"] == "stream"
    assert report["config"]["backend"]["kind"] == "vllm_python_async"
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] == 200
    assert result["requests"]["errored"] == 0
    distributions = result["distributions"]
    produced = result["totals"]["output_tokens"] if "totals" in result else None
    outputs = [sample["output_tokens"] for sample in result["samples"]]
    assert len(outputs) == 200
    if produced is not None:
        assert produced == sum(outputs)
    assert distributions["inter_token_latency"]["count"] == sum(outputs) - len(outputs)
    assert distributions["time_to_first_token"]["count"] == 200
    assert distributions["time_per_output_token"]["count"] == sum(1 for tokens in outputs if tokens > 1)
    assert distributions["batch_wait"]["max"] == 0
    # The first token comes before the end, for every request.
    assert distributions["time_to_first_token"]["max"] <= distributions["request_latency"]["max"]


def test_a_rate_profile_streams_each_request_as_it_is_issued(tmp_path: Path) -> None:
    report = run_cli(
        tmp_path,
        {"simulation": {"time_scale": 1.0}},
        {"prompt_tokens": 32, "output_tokens": 8},
        count=40,
        profile={"kind": "constant", "rate": 40},
    )
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] == 40
    samples = result["samples"]
    # Nothing holds a request back for a batch: it enters the engine as the worker receives it.
    assert all(sample["dispatched"] - sample["enqueued"] < 0.5 for sample in samples)
    assert result["distributions"]["inter_token_latency"]["count"] == 40 * 7
    assert result["distributions"]["inter_token_latency"]["median"] > 0


def test_a_too_long_prompt_fails_alone(tmp_path: Path) -> None:
    report = run_cli(
        tmp_path,
        {"vllm_config": {"max_model_len": 100}, "simulation": {"time_scale": 0.0}},
        # Prompt lengths are drawn around 80 +- 30, so some exceed max_model_len=100 and some do not.
        {"prompt_tokens": 80, "prompt_tokens_stdev": 30, "output_tokens": 4, "samples": 50},
        count=100,
        profile={"kind": "throughput", "max_concurrency": 16},
    )
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] > 0
    assert result["requests"]["errored"] > 0
    assert result["requests"]["completed"] + result["requests"]["errored"] == 100
    errors = [sample["error"] for sample in result["samples"] if sample["error"] is not None]
    assert errors
    assert all("maximum model length" in error for error in errors)


def test_the_console_shows_the_stream_s_latencies(tmp_path: Path) -> None:
    outcome = batchmark(
        tmp_path,
        [
            "run",
            "--backend",
            # vLLM's own per-request stats off (vllm.LLM's default): the stream times the tokens all the same.
            backend(dispatch="stream", **{"vllm_config.disable_log_stats": "true"}),
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            "kind=synchronous",
            "--constraint",
            "kind=max_requests,count=5",
        ],
    )
    assert outcome.code == 0, outcome.stderr
    console = outcome.stdout + outcome.stderr
    assert "TTFT, TPOT and ITL read on the stream" in console
    assert "ITL p50, ms" in console
    assert "ITL p99, ms" in console
    assert "TTFT and TPOT not measured" not in console


@pytest.mark.parametrize(
    ("field", "value"), [("batch_size", "8"), ("batch_timeout", "0.5"), ("dispatch", "continuous")]
)
def test_the_batch_backend_s_settings_are_refused_in_one_line(tmp_path: Path, field: str, value: str) -> None:
    outcome = batchmark(
        tmp_path,
        [
            "run",
            "--backend",
            f"kind=vllm_python,model=m,engine=simulated,{field}={value}",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            "kind=synchronous",
            "--constraint",
            "kind=max_requests,count=5",
        ],
    )
    assert outcome.code == 2
    assert "Traceback" not in outcome.stderr
    [line] = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert line.startswith("batchmark run: error: --backend:")
    assert f"{field}: only the vllm_python_batch" in line


def test_compare_and_the_html_report_set_batch_and_async_side_by_side(tmp_path: Path) -> None:
    outputs = {}
    for name, spec in (("batch", backend()), ("async", backend(dispatch="stream"))):
        json_output, html_output = tmp_path / f"{name}.json", tmp_path / f"{name}.html"
        outcome = batchmark(
            tmp_path,
            [
                "run",
                "--quiet",
                "--backend",
                spec,
                "--data",
                "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
                "--profile",
                "kind=throughput,max_concurrency=8",
                "--constraint",
                "kind=max_requests,count=24",
                "--output",
                str(json_output),
                "--output",
                str(html_output),
            ],
        )
        assert outcome.code == 0, outcome.stderr
        outputs[name] = (json_output, html_output)
    assert "ITL p50, ms" in outputs["async"][1].read_text()
    page = tmp_path / "trade.html"
    compared = batchmark(
        tmp_path, ["compare", str(outputs["batch"][0]), str(outputs["async"][0]), "--output", str(page)]
    )
    assert compared.code == 0, compared.stderr
    text = compared.stdout + compared.stderr
    for metric in ("output tokens/s", "TTFT p50, s", "ITL p50, s", "ITL p99, s", "latency p50, s"):
        assert metric in text, text
    # The page shows the trade: each run's throughput against its latency, the backends named.
    html = page.read_text()
    assert "Throughput against request latency" in html
    assert "Throughput against time to first token" in html
    assert "(stream)" in html
    assert "(batch)" in html
