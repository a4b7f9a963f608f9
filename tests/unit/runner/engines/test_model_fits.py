"""A tensor-parallel size that does not divide the model's attention heads is refused before any engine loads,
from the model's config.json where it is here (its folder, or the Hugging Face cache); a model not here is left
to vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines.engine_args import EngineArgumentError, check_model_fits, model_config_file


def backend(model: str, size: int) -> BackendConfig:
    return BackendConfig.model_validate(
        {"model": model, "engine": "simulated", "vllm_config": {"tensor_parallel_size": size}}
    )


def model_folder(folder: Path, **settings: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


def test_a_size_that_does_not_divide_the_heads_is_refused_naming_both(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "qwen", num_attention_heads=14, num_hidden_layers=28)
    with pytest.raises(EngineArgumentError) as refused:
        check_model_fits(backend(str(folder), 4))
    assert str(refused.value).startswith(
        "vllm_config.tensor_parallel_size (4) does not divide the model's 14 attention heads (num_attention_heads"
    )
    check_model_fits(backend(str(folder), 2))
    check_model_fits(backend(str(folder), 7))


def test_a_multimodal_models_text_config_is_read(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "vl", text_config={"num_attention_heads": 28}, vision_config={"heads": 16})
    with pytest.raises(EngineArgumentError, match="28 attention heads"):
        check_model_fits(backend(str(folder), 8))


def test_the_hugging_face_cache_is_read_and_a_model_not_here_is_left_to_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "c1899de"
    model_folder(snapshot, num_attention_heads=16)
    assert model_config_file("Qwen/Qwen3-0.6B") == snapshot / "config.json"
    with pytest.raises(EngineArgumentError, match="16 attention heads"):
        check_model_fits(backend("Qwen/Qwen3-0.6B", 3))
    assert model_config_file("Qwen/Qwen3-32B") is None
    check_model_fits(backend("Qwen/Qwen3-32B", 3))  # not downloaded here: vLLM decides
    (snapshot / "config.json").write_text("{not json", encoding="utf-8")
    check_model_fits(backend("Qwen/Qwen3-0.6B", 3))  # unreadable: vLLM decides
