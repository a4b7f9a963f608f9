"""The async backend (kind=vllm_python_async) on the real engine: vLLM's ``AsyncLLM`` in the runner's engine process,
in vLLM's default multiprocessing, each request streamed.

Each test is one engine start-up (``enforce_eager``: what is tested is the stream and how runs end, not the
compiled compute path, which test_vllm_engine covers).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.runner.harness import assert_outputs, children, cmdline
from tests.integration.vllm.conftest import MAX_MODEL_LEN, VllmSetup
from tests.integration.vllm.test_exit_paths import (
    AFTER_EXIT_SECONDS,
    assert_nothing_outlives,
    engines_among,
    started_processes,
)
from tests.integration.vllm.test_vllm_faults import completed_requests, started_with_metrics

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

OUTPUT_TOKENS = 12


def async_backend(setup: VllmSetup, **overrides: Any) -> dict[str, Any]:
    backend = setup.eager_backend(**overrides)
    backend["kind"] = "vllm_python_async"
    del backend["batch_size"]
    return backend


def test_a_streamed_run_times_every_token_fails_a_too_long_prompt_alone_and_ends_cleanly_on_sigterm(
    vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    """One engine start for three things: the stream's timings, a bad request failing alone, and SIGTERM (what
    Kubernetes sends) writing the results with no process of vLLM's left."""
    config = {
        "name": "vllm-cpu-async",
        "backend": async_backend(vllm_setup),
        # Prompts of 470 +- 30 tokens against a 512-token context: some are refused, the rest stream.
        "data": {
            "kind": "synthetic_text",
            "prompt_tokens": MAX_MODEL_LEN - OUTPUT_TOKENS - 30,
            "prompt_tokens_stdev": 30,
            "output_tokens": OUTPUT_TOKENS,
            "samples": 200,
        },
        "profile": {"kind": "throughput", "max_concurrency": 8},
        "constraints": [{"kind": "max_duration", "seconds": 600}],
        "sample_requests": 5000,
    }
    run = vllm_setup.start_batchmark(config, tmp_path)
    try:
        processes = started_processes(run)
        engines = engines_among(processes)
        time.sleep(4.0)  # requests streaming, many finished
        run.process.send_signal(signal.SIGTERM)
        assert run.wait() == 128 + signal.SIGTERM, run.stderr()[-4000:]
    finally:
        run.process.kill()
    assert_nothing_outlives(run, processes, engines, AFTER_EXIT_SECONDS)
    report = run.report()
    assert report is not None
    assert report["dispatch"] == "stream"
    assert report["engine"]["details"]["engine_api"] == "AsyncLLM"
    [benchmark] = report["benchmarks"]
    assert benchmark["stop_reason"] == "interrupted by SIGTERM"
    requests = benchmark["requests"]
    assert requests["completed"] > 0
    assert requests["errored"] > 0
    errors = [sample["error"] for sample in benchmark["samples"] if sample["error"] is not None]
    assert len(errors) == requests["errored"]
    assert all("maximum" in error and "length" in error for error in errors), errors
    # Every token after a request's first is an interval read on the stream, its first token a TTFT. (Lengths are
    # pinned, but a prompt within OUTPUT_TOKENS of the context stops early, as vLLM stops at max_model_len.)
    completed = requests["completed"]
    streamed = [sample["output_tokens"] for sample in benchmark["samples"] if sample["error"] is None]
    assert len(streamed) == completed
    assert benchmark["tokens"]["output"] == sum(streamed)
    assert all(0 < tokens <= OUTPUT_TOKENS for tokens in streamed)
    distributions = benchmark["distributions"]
    assert distributions["inter_token_latency"]["count"] == sum(streamed) - completed
    assert distributions["inter_token_latency"]["median"] > 0
    assert distributions["time_to_first_token"]["count"] == completed
    assert 0 < distributions["time_to_first_token"]["median"] <= distributions["request_latency"]["median"]
    assert "Passing raw prompts" not in run.stderr()


def test_the_engine_core_dying_mid_run_ends_the_run_with_what_completed(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    """AsyncLLM notices its engine core's death itself (EngineDeadError on every stream): the run ends at once."""
    outputs = [tmp_path / "r.json"]
    path = tmp_path / "run.yaml"
    document = {
        "backend": async_backend(vllm_setup),
        "data": {"kind": "synthetic_text", "prompt_tokens": 48, "output_tokens": 16},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_duration", "seconds": 300}],
        "outputs": [str(output) for output in outputs],
    }
    path.write_text(yaml.safe_dump(document))
    program, port = started_with_metrics(vllm_setup, tmp_path, path)
    program.wait_for("benchmark 1", timeout=240)
    worker = program.worker()
    found: list[int] = []

    def core_started() -> bool:
        found[:] = [pid for pid in children(worker) if cmdline(pid).startswith("VLLM::EngineCore")]
        return bool(found)

    program.wait_until(core_started, "started vLLM's engine core process", 240)
    program.wait_until(lambda: completed_requests(port) >= 16, "16 requests done", 240)
    os.kill(found[0], signal.SIGKILL)
    killed = time.monotonic()
    outcome = program.finish(timeout=120)
    assert time.monotonic() - killed < 60, "the run outlived its engine by a minute"
    assert outcome.code == 3, outcome.stderr
    # vLLM's async client logs the death with its own traceback (its output handler's logger.exception); none
    # of batchmark's may follow it.
    output = outcome.stdout + outcome.stderr
    tracebacks = [line for line in output.splitlines() if "Traceback" in line]
    assert all("[async_llm.py" in line for line in tracebacks), tracebacks
    core = found[0]
    assert f"vLLM's engine core process {core} died (killed by SIGKILL)" in outcome.message, outcome.stderr
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason=f"process {core} died (killed by SIGKILL)")
    [benchmark] = json.loads(outputs[0].read_text())["benchmarks"]
    assert benchmark["interrupted"] is True
    assert benchmark["requests"]["completed"] > 0
