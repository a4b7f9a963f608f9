"""The engine registry: every entry complete, the names the config allows, unknown names refused, light to import."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from typing import get_args

import pytest

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines.base import ContinuousEngine, EngineInfo
from batchmark.runner.engines.registry import (
    ENGINES,
    UnknownEngine,
    engine_entry,
    engine_summary,
    unloaded_engine_summary,
)
from batchmark.runner.engines.simulated_engine import SIMULATED
from batchmark.runner.engines.vllm_engine import VLLM
from batchmark.runner.observe.statuswriter import StatusTarget, StatusWriter
from batchmark.runner.results.summary import engine_status
from tests.unit.runner.observe.test_status_writer import RecordingApi


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_entry_is_complete(name: str) -> None:
    entry = ENGINES[name]
    assert entry.name == name
    for field in fields(entry):
        assert getattr(entry, field.name) is not None or field.name in ("banner", "node_args"), field.name
    # An engine over several pods is a real one's; a simulated engine models one process.
    assert entry.node_args is None or not entry.simulated
    assert entry.settings in BackendConfig.model_fields
    assert entry.loaded_label
    # A simulated engine says so above its results; a measuring one has nothing to warn of.
    assert (entry.banner is not None) == entry.simulated
    if entry.banner is not None:
        assert "{gpu}" in entry.banner
    assert set(entry.pod.requests) == {"cpu", "memory"}
    for check in (entry.check_available, entry.check_argument, entry.load, entry.count_tokens):
        assert callable(check)


def test_the_registry_and_the_config_name_the_same_engines() -> None:
    """The config lies below the engines and cannot read the registry: its allowed values must follow it."""
    allowed = get_args(BackendConfig.model_fields["engine"].annotation)
    assert sorted(allowed) == sorted(ENGINES)
    assert BackendConfig.model_fields["engine"].default in ENGINES


def test_an_unknown_engine_is_refused_naming_the_field() -> None:
    with pytest.raises(UnknownEngine, match=r"backend\.engine: no engine 'tgi'; the engines are vllm, simulated"):
        engine_entry("tgi")


def test_the_simulated_engine_does_what_its_entry_says() -> None:
    backend = BackendConfig(model="m", engine="simulated", simulation={"time_scale": 0, "gpu_name": "modelled"})
    engine = SIMULATED.load(backend, 1)
    try:
        assert engine.info.kind == SIMULATED.name
        assert isinstance(engine, ContinuousEngine) == SIMULATED.continuous_dispatch
        assert SIMULATED.configured_device(backend) == engine.info.gpu_name == "modelled"
    finally:
        engine.close()
    tokens = SIMULATED.count_tokens(backend, [100, 60])
    assert (tokens.count("héllo"), tokens.max_model_len, tokens.tokenizer) == (6, 60, "utf-8 bytes")
    assert SIMULATED.pod.gpus({"tensor_parallel_size": 4}, "vllmConfig") == 0


def test_vllms_pod_needs_its_parallel_gpus() -> None:
    assert VLLM.pod.gpus({}, "vllmConfig") == 1
    assert VLLM.pod.gpus({"tensor_parallel_size": 2, "pipeline_parallel_size": 3}, "vllmConfig") == 6
    with pytest.raises(ValueError, match=r"^vllmConfig\.tensor_parallel_size must be a positive integer, got 0$"):
        VLLM.pod.gpus({"tensor_parallel_size": 0}, "vllmConfig")


def test_the_summary_comes_from_what_the_engine_reports() -> None:
    info = EngineInfo(kind="simulated", model="m", version=None, gpu_name="modelled", details={"max_num_seqs": 8})
    summary = engine_summary(info, 1.5)
    assert (summary.kind, summary.simulated, summary.gpu_name, summary.loaded) == ("simulated", True, "modelled", True)
    assert summary.details == {"max_num_seqs": 8}
    assert engine_summary(EngineInfo(kind="vllm", model="m", version="0.32"), 2.0).simulated is False


def test_the_status_shows_the_summary_the_report_holds() -> None:
    api = RecordingApi()
    writer = StatusWriter(StatusTarget("team", "bb", "uid-1", None, None, None), api_factory=lambda: api)
    info = EngineInfo(kind="simulated", model="m", gpu_name="modelled", details={"max_num_seqs": 8})
    writer.on_engine_loaded(info, 1.23456789)
    writer.close()
    final = engine_status(engine_summary(info, 1.23456789)).model_dump(mode="json", by_alias=True, exclude_none=True)
    # While it runs the status gives the load time to 0.1 ms; at the end, to 4 significant digits.
    assert api.status_patches[-1]["engine"] == {**final, "loadSeconds": 1.2346}
    assert final["loadSeconds"] == 1.235


def test_an_engine_that_never_loaded_is_summarised_from_the_config() -> None:
    backend = BackendConfig(model="m", engine="simulated", simulation={"gpu_name": "modelled"})
    summary = unloaded_engine_summary(backend, 0.25)
    assert (summary.kind, summary.simulated, summary.gpu_name, summary.loaded) == ("simulated", True, "modelled", False)
    assert (summary.version, summary.details, summary.load_seconds) == (None, {}, 0.25)
    assert unloaded_engine_summary(BackendConfig(model="m"), 0.0).gpu_name is None


def test_the_registry_is_light_to_import() -> None:
    """The operator imports it: no engine's heavy packages load before an engine does."""
    code = (
        "import sys, batchmark.runner.engines.registry;"
        "print(sorted({'vllm', 'torch', 'transformers'} & {name.split('.')[0] for name in sys.modules}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
