"""The real vLLM engine on this machine's CPU: its venv, a tiny local model, and how to run processes with it.

vLLM lives in its own venv (.venv-vllm, made by scripts/setup/vllm.sh), so these tests drive it through
subprocesses: the CLI, the worker, or a probe script, each run with that venv's Python. A test skips only when
vLLM cannot be imported there; any other failure fails it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
MAKE_MODEL = HERE / "make_tiny_model.py"
# Small enough to run fast on 2 cores, big enough to exercise chunked prefill and preemption-free batching.
MAX_MODEL_LEN = 512
HIDDEN_SIZE = 128


def vllm_python() -> Path:
    configured = os.environ.get("BATCHMARK_VLLM_PYTHON")
    return Path(configured) if configured else ROOT / ".venv-vllm" / "bin" / "python"


def vllm_env(**extra: str) -> dict[str, str]:
    """Environment for a process that builds ``vllm.LLM`` on this CPU (see /work/shared/VLLM_ON_CPU.md)."""
    env = dict(os.environ)
    env.update(
        # An explicit KV cache size: otherwise vLLM sizes it from the whole node and refuses to start when
        # other processes hold memory.
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        # The engine core in-process: 2-3 s to build instead of 15-22 s, and one process instead of three.
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
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

    def run(
        self, args: list[str], timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
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
        self, config: dict[str, Any], workdir: Path, timeout: float = 300, **env: str
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
        """``batchmark run --config`` in the vLLM venv; returns the process and the JSON report, if written."""
        report_path = workdir / "report.json"
        config = {**config, "outputs": [str(report_path)]}
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        result = self.run(
            ["-m", "batchmark.runner.cli", "run", "--config", str(config_path), "--quiet"],
            timeout=timeout,
            env=vllm_env(**env),
        )
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        return result, report


def _model_dir(python: Path) -> Path:
    # Keyed by the builder's source: a change to it builds a new model instead of reusing a stale one.
    digest = hashlib.sha256(MAKE_MODEL.read_bytes()).hexdigest()[:12]
    return python.parent.parent / "models" / f"tiny-llama-h{HIDDEN_SIZE}-{digest}"


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
    model = _model_dir(python)
    if not (model / "model.safetensors").exists():
        building = model.with_name(model.name + ".tmp")
        made = subprocess.run(
            [str(python), str(MAKE_MODEL), str(building), "--hidden-size", str(HIDDEN_SIZE)],
            env=vllm_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert made.returncode == 0, f"building the tiny model failed:\n{made.stderr[-3000:]}"
        building.rename(model)
    return VllmSetup(python=python, model=model)


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """A failed process's exit code and the end of its output, for assertion messages."""
    return (
        f"exit code {result.returncode}\n--- stdout ---\n{result.stdout[-4000:]}\n"
        f"--- stderr ---\n{result.stderr[-6000:]}"
    )
