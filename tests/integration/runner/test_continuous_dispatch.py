"""Continuous dispatch on the simulated engine: its step API, and the whole run through the CLI and worker.

The same loop drives the real vLLM engine in tests/integration/vllm; here the simulated engine's
``llm_engine`` (add_request/step, as vLLM's LLMEngine) makes it fast and deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner.engines.simulated import SamplingParams, SimulatedLLM, TokensPrompt
from tests.cli import run_and_load

pytestmark = pytest.mark.integration


def pinned(tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0)


def test_step_api_admits_requests_while_running_and_keeps_timestamps_ordered() -> None:
    llm = SimulatedLLM(model="m", time_scale=1.0, step_fixed_seconds=0.001, batched_token_seconds=1e-6)
    engine = llm.llm_engine
    engine.add_request("a", TokensPrompt(prompt_token_ids=[5] * 30), pinned(6))
    finished: dict[str, Any] = {}
    steps = 0
    while engine.has_unfinished_requests():
        for output in engine.step():
            finished[output.request_id] = output
        steps += 1
        if steps == 2:
            engine.add_request("b", TokensPrompt(prompt_token_ids=[7] * 10), pinned(3))
    assert set(finished) == {"a", "b"}
    assert [len(finished[key].outputs[0].token_ids) for key in "ab"] == [6, 3]
    assert finished["b"].prompt_token_ids == [7] * 10
    # "b" joined the running batch: it finished before "a", whose 6 tokens need 6 steps.
    assert steps == 6
    for output in finished.values():
        stats = output.metrics
        assert stats.queued_ts <= stats.scheduled_ts <= stats.first_token_ts <= stats.last_token_ts
    assert finished["b"].metrics.queued_ts > finished["a"].metrics.queued_ts


def test_step_api_rejects_an_invalid_request_alone() -> None:
    llm = SimulatedLLM(model="m", time_scale=0.0, max_model_len=16)
    engine = llm.llm_engine
    with pytest.raises(ValueError, match="maximum model length"):
        engine.add_request("long", TokensPrompt(prompt_token_ids=[1] * 17), pinned(2))
    engine.add_request("ok", TokensPrompt(prompt_token_ids=[1] * 8), pinned(2))
    outputs = []
    while engine.has_unfinished_requests():
        outputs.extend(engine.step())
    assert [output.request_id for output in outputs] == ["ok"]


def run_cli(tmp_path: Path, backend: dict[str, Any], data: dict[str, Any], count: int, concurrency: int) -> Any:
    config = {
        "backend": {"kind": "vllm_python_batch", "model": "sim", "engine": "simulated", **backend},
        "data": {"kind": "synthetic_text", **data},
        "profile": {"kind": "throughput", "max_concurrency": concurrency},
        "constraints": [{"kind": "max_requests", "count": count}],
        "sample_requests": count,
    }
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    return run_and_load(tmp_path / "report.json", ["--config", str(config_path)], in_process=True)


def test_continuous_run_keeps_the_engine_busy_and_caps_in_flight_by_batch_size(tmp_path: Path) -> None:
    report = run_cli(
        tmp_path,
        {"batch_size": 16, "dispatch": "continuous", "batch_timeout": 5.0},
        {"prompt_tokens": 64, "output_tokens": 32, "output_tokens_stdev": 8, "output_tokens_min": 8},
        count=400,
        concurrency=64,
    )
    assert report["dispatch"] == "continuous"
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] == 400
    assert result["requests"]["errored"] == 0
    # A 5 s batch_timeout would stall batch dispatch on every partial batch; continuous dispatch ignores it.
    assert result["duration"] < 5.0
    assert result["engine_utilization"] > 0.9
    assert result["distributions"]["batch_wait"]["max"] == 0
    samples = result["samples"]
    assert all(sample["enqueued"] <= sample["dispatched"] <= sample["completed"] for sample in samples)
    # No more than batch_size requests were ever in the engine at once.
    events = sorted(
        [(sample["dispatched"], 1) for sample in samples] + [(sample["completed"], -1) for sample in samples]
    )
    in_flight = peak = 0
    for _, change in events:
        in_flight += change
        peak = max(peak, in_flight)
    assert peak <= 16
    # The effective batch is what the engine runs per step: held at the cap while requests wait.
    assert result["distributions"]["batch_size"]["max"] == 16
    assert result["distributions"]["batch_size"]["median"] == 16


def test_continuous_run_fails_a_too_long_prompt_alone(tmp_path: Path) -> None:
    report = run_cli(
        tmp_path,
        {"batch_size": 8, "dispatch": "continuous", "vllm_config": {"max_model_len": 100}},
        {"prompt_tokens": 80, "prompt_tokens_stdev": 30, "output_tokens": 4, "samples": 50},
        count=100,
        concurrency=16,
        # Prompt lengths are drawn around 80 +- 30, so some exceed max_model_len=100 and some do not.
    )
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] > 0
    assert result["requests"]["errored"] > 0
    assert result["requests"]["completed"] + result["requests"]["errored"] == 100
    errors = [sample["error"] for sample in result["samples"] if sample["error"] is not None]
    assert errors
    assert all("maximum model length" in error for error in errors)
    assert all(sample["prompt_tokens"] <= 100 for sample in result["samples"] if sample["error"] is None)


def test_step_api_aborts_requests_by_id() -> None:
    engine = SimulatedLLM(model="m", time_scale=0.0).llm_engine
    engine.add_request("keep", TokensPrompt(prompt_token_ids=[1] * 8), pinned(4))
    engine.add_request("drop", TokensPrompt(prompt_token_ids=[2] * 8), pinned(4))
    engine.step()
    engine.abort_request(["drop", "unknown"])
    outputs = []
    while engine.has_unfinished_requests():
        outputs.extend(engine.step())
    assert [output.request_id for output in outputs] == ["keep"]


@pytest.mark.parametrize("dispatch", ["batch", "continuous"])
def test_a_run_reports_engine_steps_overhead_and_utilisation_of_the_engine_calls_only(
    tmp_path: Path, dispatch: str
) -> None:
    report = run_cli(
        tmp_path,
        {"batch_size": 8, "dispatch": dispatch, "simulation": {"time_scale": 1.0}},
        {"prompt_tokens": 32, "output_tokens": 16},
        count=64,
        concurrency=8,
    )
    [result] = report["benchmarks"]
    assert result["requests"]["completed"] == 64
    if dispatch == "batch":
        # Eight full batches, each one prefill step (it also samples the first token) and fifteen decode steps.
        assert result["engine_steps"] == 8 * 16
    assert result["engine_steps_per_1000_requests"] == pytest.approx(1000 * result["engine_steps"] / 64)
    assert result["engine_steps"] >= 8 * 16  # never fewer steps than full batches need
    overhead = result["distributions"]["dispatch_overhead"]
    assert overhead["count"] == result["batches"]
    assert 0 <= overhead["min"] <= overhead["max"] < 0.5
    # Utilisation is the engine calls' share of the window: the timeline's busy seconds over that window.
    busy = sum(point["engine_busy"] for point in result["timeline"])
    assert result["engine_utilization"] == pytest.approx(min(1.0, busy / result["measured_duration"]), abs=0.01)
    assert 0.5 < result["engine_utilization"] <= 1.0
    assert result["harness_cpu_seconds"] > 0
    assert result["harness_cpu_per_request"] == pytest.approx(result["harness_cpu_seconds"] / 64)
