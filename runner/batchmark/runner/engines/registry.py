"""Every engine the runner can run, one line each, and the one place that says what an engine reports.

Adding an engine is a module with its ``EngineEntry`` (as simulated_engine.py and vllm_engine.py have) plus its
line in ``ENGINES`` (docs/architecture.md, "Adding an engine"). No engine loads until an entry's ``load`` runs
(vLLM and torch are imported there), so the operator reads a pod's needs here; the engine modules' own imports
(numpy, jinja2: about 25 MB) do come with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.engines.entry import EngineEntry
from batchmark.runner.engines.simulated_engine import SIMULATED
from batchmark.runner.engines.vllm_engine import VLLM
from batchmark.runner.results.report import EngineSummary

ENGINES: Mapping[str, EngineEntry] = MappingProxyType(
    {
        VLLM.name: VLLM,
        SIMULATED.name: SIMULATED,
    }
)


class UnknownEngine(ValueError):
    """backend.engine names no engine of the registry."""


def engine_entry(name: str) -> EngineEntry:
    try:
        return ENGINES[name]
    except KeyError:
        raise UnknownEngine(f"backend.engine: no engine {name!r}; the engines are {', '.join(ENGINES)}") from None


def engine_packages() -> list[str]:
    """The packages whose versions explain an engine's results, of every engine (the report's environment)."""
    return [package for entry in ENGINES.values() for package in entry.versions]


def engine_summary(info: EngineInfo, load_seconds: float) -> EngineSummary:
    """The engine as the results and the status show it, from what the loaded engine reports."""
    return EngineSummary(
        kind=info.kind,
        simulated=engine_entry(info.kind).simulated,
        model=info.model,
        version=info.version,
        gpu_name=info.gpu_name,
        load_seconds=load_seconds,
        details=info.details,
    )


def unloaded_engine_summary(backend: BackendConfig, loading_seconds: float) -> EngineSummary:
    """The engine of a run that ended before it had loaded: what is known comes from the config."""
    entry = engine_entry(backend.engine)
    return EngineSummary(
        kind=entry.name,
        simulated=entry.simulated,
        model=backend.model,
        version=None,
        gpu_name=entry.configured_device(backend),
        load_seconds=loading_seconds,
        loaded=False,
        details={},
    )
