"""What the runner and the operator know of one engine, in one place: its ``EngineEntry`` (registry.py lists them).

Nothing outside an engine's own module asks which engine runs: it asks the engine's entry. Its loader imports the
heavy parts, vLLM and torch, only when it runs, so the operator reads a pod's needs from it without loading an
engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines.base import Engine
from batchmark.runner.engines.engine_nodes import EngineNodes
from batchmark.runner.engines.streaming import StreamingEngine
from batchmark.runner.engines.tokens import Tokens


class EngineUnavailable(RuntimeError):
    """The engine cannot run here; the message says why and what to do instead."""


@dataclass(frozen=True)
class PodNeeds:
    """What the runner's pod needs for the engine; the operator merges it into the Job's container."""

    # CPU and memory requested where the spec gives neither a request nor a limit (a pod with none is the first
    # the kubelet evicts).
    requests: Mapping[str, str]
    # GPUs the engine occupies, from its arguments (vllm_config, named in errors by the second argument);
    # raises ValueError for an argument that cannot give a count.
    gpus: Callable[[Mapping[str, Any], str], int]


@dataclass(frozen=True)
class EngineEntry:
    """One engine: how to check, load and describe it, and what a run and a pod need for it."""

    name: str  # backend.engine's value
    settings: str  # the backend field with the engine's own settings (e.g. simulation; vllm_config passes through)
    simulated: bool  # timings modelled, not measured: the results say so
    loaded_label: str  # how the console names the engine once it has loaded
    banner: str | None  # shown above a simulated engine's results, {gpu} its device; None: nothing to warn of
    continuous_dispatch: bool  # takes requests while it runs (backend.dispatch=continuous)
    versions: tuple[str, ...]  # packages whose versions explain its results (the report's environment)
    pod: PodNeeds
    # Fails fast, loading nothing, where the engine cannot run on this machine (EngineUnavailable).
    check_available: Callable[[BackendConfig], None]
    # Refuses one vllm_config entry the engine cannot use (EngineArgumentError); the flag says whether vLLM's
    # own names were known, and checked, already.
    check_argument: Callable[[str, Any, bool], None]
    # Builds the engine (for vLLM this loads the weights); runs in the engine's worker process.
    load: Callable[[BackendConfig, int], Engine]
    # Counts the user's prompts in the engine's tokens before it loads; the int list holds the max_model_len
    # values the backends ask for.
    count_tokens: Callable[[BackendConfig, list[int]], Tokens]
    # The device's name as the config gives it, for a report whose engine never loaded (None: only the load knows).
    configured_device: Callable[[BackendConfig], str | None]
    # An engine that spans several pods (spec.parallelism.nodesPerReplica): the keywords of a node that holds only
    # its workers (engine_nodes.serve_engine_node). None: the engine runs in one pod.
    node_args: Callable[[BackendConfig, EngineNodes], dict[str, Any]] | None = None
    # Builds the engine for the async backend (kind=vllm_python_async), streaming each request's tokens; runs in the
    # engine's worker process. None: the engine cannot stream.
    load_streaming: Callable[[BackendConfig, int], StreamingEngine] | None = None
