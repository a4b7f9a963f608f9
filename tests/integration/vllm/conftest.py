"""The real vLLM engine on this machine's CPU: its venv, a tiny local model, and how to run processes with it.

vLLM lives in its own venv (.venv-vllm, made by scripts/setup/vllm.sh), so these tests drive it through
subprocesses: the CLI, the worker, or a probe script, each run with that venv's Python. A test skips only when
vLLM cannot be imported there; any other failure fails it.

The engine runs as users run it: vLLM's default multiprocessing, its engine core and worker in processes of
their own. After every test, no ``VLLM::`` process that the test started may be left. Which are this test
session's is told by a mark in their environment (SESSION_VARIABLE): other sessions, pytest-xdist's other
workers or a user's runs on the same machine may run engines of their own meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import PROGRAM, command
from tests.integration.process_tree import engine_processes_now, marked_with, still_alive

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
MAKE_MODEL = HERE / "make_tiny_model.py"
# Small enough to run fast on 2 cores, big enough to exercise chunked prefill and preemption-free batching.
MAX_MODEL_LEN = 512
HIDDEN_SIZE = 128
# For hangs, not speed: a run takes 30-40 s on an idle 2-core machine, but 4-5 minutes has been seen while
# other builds held both cores; pytest's own timeout (600 s) stays above it.
RUN_TIMEOUT = 540.0
SESSION_VARIABLE = "BATCHMARK_TEST_SESSION"
SESSION_MARK = f"{os.getpid()}-{time.time_ns()}"


def vllm_python() -> Path:
    configured = os.environ.get("BATCHMARK_VLLM_PYTHON")
    return Path(configured) if configured else ROOT / ".venv-vllm" / "bin" / "python"


def vllm_env(**extra: str) -> dict[str, str]:
    """Environment for a process that builds ``vllm.LLM`` on this CPU (README.md beside this file says why).

    vLLM's own multiprocessing stays on, as users run it; a test that wants the engine in-process passes
    ``VLLM_ENABLE_V1_MULTIPROCESSING="0"`` and says why.
    """
    env = dict(os.environ)
    env.update(
        # An explicit KV cache size: otherwise vLLM sizes it from the whole node and refuses to start when
        # other processes hold memory.
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    env[SESSION_VARIABLE] = SESSION_MARK
    env.update(extra)
    return env


@dataclass(frozen=True)
class VllmSetup:
    python: Path
    model: Path

    def vllm_config(self, **overrides: Any) -> dict[str, Any]:
        # float32: bfloat16 on a CPU with AMX can die with SIGILL in vLLM's attention kernel.
        config: dict[str, Any] = {"dtype": "float32", "max_model_len": MAX_MODEL_LEN, "seed": 0}
        config.update(overrides)
        return config

    def backend(self, **overrides: Any) -> dict[str, Any]:
        backend: dict[str, Any] = {
            "kind": "vllm_python_batch",
            "model": str(self.model),
            "engine": "vllm",
            "batch_size": 8,
            "request_format": "plain",
            "vllm_config": self.vllm_config(),
        }
        backend.update(overrides)
        return backend

    def eager_backend(self, **overrides: Any) -> dict[str, Any]:
        """``backend`` with vLLM's ``enforce_eager``: no torch.compile at start-up (about 12 s of CPU of each
        engine's 40 here). For the tests of how runs end and of what data reaches the engine, which do not test
        the engine's compute path; test_vllm_engine and test_vllm_sweep run vLLM's default, compiled."""
        backend = self.backend(**overrides)
        backend["vllm_config"] = {**backend["vllm_config"], "enforce_eager": True}
        return backend

    def run_python(
        self, args: list[str], timeout: float = RUN_TIMEOUT, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """This venv's Python on ``args`` (a script, ``-c`` or ``-m``), to its end, its output captured."""
        return subprocess.run(
            [str(self.python), *args],
            cwd=ROOT,
            env=env or vllm_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def batchmark(
        self, config: dict[str, Any], workdir: Path, timeout: float = RUN_TIMEOUT, **env: str
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
        """``batchmark run --config`` in the vLLM venv; returns the process and the JSON report, if written."""
        report_path = workdir / "report.json"
        config = {**config, "outputs": [str(report_path)]}
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        result = self.run_python(
            [*PROGRAM, "run", "--config", str(config_path), "--quiet"],
            timeout=timeout,
            env=vllm_env(**env),
        )
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        return result, report

    def start_batchmark(
        self, config: dict[str, Any], workdir: Path, args: tuple[str, ...] = (), **env: str
    ) -> RunningBatchmark:
        """``batchmark run --config`` (and ``args``) in the background, in a session of its own (as a shell runs
        a command)."""
        config = {**config, "outputs": [str(workdir / "report.json")]}
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        stderr = workdir / "stderr.txt"
        with stderr.open("w") as log:
            process = subprocess.Popen(
                command("run", "--config", str(config_path), "--quiet", *args, python=self.python),
                cwd=ROOT,
                env=vllm_env(**env),
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        return RunningBatchmark(process, workdir / "report.json", stderr)


@dataclass
class RunningBatchmark:
    """A ``batchmark run`` started in the background; its stderr goes to a file."""

    process: subprocess.Popen[str]
    report_path: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = RUN_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr():
            if self.process.poll() is not None:
                raise AssertionError(f"exited ({self.process.returncode}) before {text!r}:\n{self.stderr()[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout} s:\n{self.stderr()[-6000:]}")
            time.sleep(0.2)

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise

    def report(self) -> dict[str, Any] | None:
        return json.loads(self.report_path.read_text()) if self.report_path.exists() else None


def _model_dir() -> Path:
    # Per machine, so a fresh clone reuses it (BATCHMARK_MODELS_CACHE moves it). Keyed by the builder's source: a
    # change to it builds a new model instead of reusing a stale one.
    cache = Path(os.environ.get("BATCHMARK_MODELS_CACHE", Path.home() / ".cache" / "batchmark" / "models"))
    digest = hashlib.sha256(MAKE_MODEL.read_bytes()).hexdigest()[:12]
    return cache / f"tiny-llama-h{HIDDEN_SIZE}-{digest}"


@pytest.fixture(scope="session")
def vllm_setup() -> VllmSetup:
    python = vllm_python()
    if not python.exists():
        pytest.skip(f"vLLM is not installed: {python} does not exist (scripts/setup/vllm.sh makes it)")
    probe = subprocess.run(
        [str(python), "-c", "from vllm import LLM, SamplingParams; import batchmark.runner"],
        env=vllm_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if probe.returncode != 0:
        tail = probe.stderr.strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"vLLM cannot be imported with {python}: {tail[0]}")
    model = _model_dir()
    if not (model / "model.safetensors").exists():
        # A folder of this process's own: two test sessions may build it at once, and the first rename wins.
        building = model.with_name(f"{model.name}.{os.getpid()}.tmp")
        shutil.rmtree(building, ignore_errors=True)
        made = subprocess.run(
            [str(python), str(MAKE_MODEL), str(building), "--hidden-size", str(HIDDEN_SIZE)],
            env=vllm_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert made.returncode == 0, f"building the tiny model failed:\n{made.stderr[-3000:]}"
        try:
            building.rename(model)
        except OSError:  # another session's build got there first; same source, same model
            shutil.rmtree(building, ignore_errors=True)
    return VllmSetup(python=python, model=model)


@pytest.fixture(autouse=True)
def no_engine_process_outlives_the_test() -> Iterator[None]:
    """After the test, none of the ``VLLM::`` processes it started may still run (other sessions' are left
    alone).

    Checked at once: every process that started one has exited by then, and must have ended it. Any found
    are killed, so that one leak fails one test instead of starving the next ones of memory.
    """
    before = engine_processes_now()
    yield
    started = {pid: start for pid, start in engine_processes_now().items() if before.get(pid) != start}
    left = marked_with(started, SESSION_VARIABLE, SESSION_MARK)
    alive = still_alive(left)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert alive == [], f"vLLM engine processes outlived the test: {alive}"


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """A failed process's exit code and the end of its output, for assertion messages."""
    return (
        f"exit code {result.returncode}\n--- stdout ---\n{result.stdout[-4000:]}\n"
        f"--- stderr ---\n{result.stderr[-6000:]}"
    )
