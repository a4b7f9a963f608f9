"""What makes two runs comparable. A run's fingerprint splits what it measured into the workload (the data and its
lengths, the request format, the profile and constraints, the model and its revision, the engine settings, the
hardware and the parallelism), which two runs must share to be compared, and the stack that served it (vLLM's and
batchmark's versions, the simulated engine's cost model, the runner image), whose change is what a comparison across
runs is for: the same workload on vLLM 0.32 and 0.33, or on two builds of the runner image, is the regression
question."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from batchmark.runner.results.report import ResultModel, RunReport

# The backend's fields that are the stack, not the workload: the simulated engine's cost model stands for the
# engine's speed, as a vLLM version does.
_STACK_BACKEND_FIELDS = ("simulation",)
# Greedy decoding is the only sampling both engines use (the engines set temperature 0); recorded so that a
# future sampling option changes the fingerprint.
_SAMPLING = {"temperature": 0.0}


class Fingerprint(ResultModel):
    """A run's workload and the stack that served it."""

    key: str = Field(description="Short hash of the workload: runs with the same key are comparable.")
    workload: dict[str, Any] = Field(description="What two runs must share to be compared.")
    stack: dict[str, Any] = Field(description="What served the workload; what a comparison across runs is for.")


def fingerprint(report: RunReport) -> Fingerprint:
    config = report.config
    backend: dict[str, Any] = dict(config.get("backend", {}))
    vllm_config: dict[str, Any] = dict(backend.get("vllm_config") or {})
    replicas = int(backend.get("replicas", 1) or 1)
    data: dict[str, Any] = dict(config.get("data", {}))
    if report.data is not None:
        data["content_hash"] = report.data.content_hash
        data["forced_output_lengths"] = report.data.forced_output_lengths
    tensor_parallel = int(vllm_config.get("tensor_parallel_size", 1) or 1)
    pipeline_parallel = int(vllm_config.get("pipeline_parallel_size", 1) or 1)
    workload: dict[str, Any] = {
        "model": backend.get("model", report.engine.model),
        "model_revision": vllm_config.get("revision"),
        "engine": backend.get("engine", report.engine.kind),
        "backend": {name: value for name, value in backend.items() if name not in _STACK_BACKEND_FIELDS},
        "sampling": _SAMPLING,
        "data": data,
        "profile": config.get("profile"),
        "constraints": config.get("constraints"),
        "sweep": config.get("sweep"),
        "hardware": {
            "gpu_name": report.engine.gpu_name,
            # The count the cost is priced on where one was given (--gpus), else what the engines occupy.
            "gpus": (config.get("cost") or {}).get("gpus") or tensor_parallel * pipeline_parallel * replicas,
        },
        "parallelism": {
            "tensor_parallel_size": tensor_parallel,
            "pipeline_parallel_size": pipeline_parallel,
            "replicas": replicas,
        },
    }
    stack: dict[str, Any] = {
        "engine_version": report.engine.version,
        "batchmark_version": report.batchmark_version,
        "simulated": report.engine.simulated,
        "simulation": backend.get("simulation") if report.engine.simulated else None,
        "python": report.environment.get("python"),
        "image": _image(report),
    }
    return Fingerprint(key=workload_key(workload), workload=workload, stack=stack)


def _image(report: RunReport) -> dict[str, Any] | None:
    """The runner image the run's pod ran, its reference and digest as the kubelet reported them; None where the
    run knows none (outside a BatchBenchmark's pod)."""
    image = report.environment.get("image")
    if not isinstance(image, dict):
        return None
    return {"reference": image.get("image"), "digest": image.get("digest")}


def workload_key(workload: dict[str, Any]) -> str:
    canonical = json.dumps(workload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def workload_differences(first: Fingerprint, second: Fingerprint) -> list[str]:
    """Each workload setting the two runs do not share, as "PATH: A against B" (empty: comparable)."""
    return [f"{path}: {_shown(a)} against {_shown(b)}" for path, a, b in _differences(first.workload, second.workload)]


def _differences(first: Any, second: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(first, dict) and isinstance(second, dict):
        found: list[tuple[str, Any, Any]] = []
        for name in sorted(set(first) | set(second), key=str):
            found += _differences(first.get(name), second.get(name), f"{path}.{name}" if path else str(name))
        return found
    return [] if first == second else [(path, first, second)]


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True, default=str)
