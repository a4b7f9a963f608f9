"""The two in-process backends by GuideLLM's names: vllm_python_batch and vllm_python_async (alias vllm_python)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from batchmark.runner.config.backend import BackendConfig


def test_guidellm_s_alias_names_the_async_backend() -> None:
    backend = BackendConfig(kind="vllm_python", model="m")
    assert backend.kind == "vllm_python_async"
    assert backend.streams
    assert backend.dispatch_mode == "stream"


def test_the_batch_backend_keeps_its_dispatch() -> None:
    backend = BackendConfig(model="m", dispatch="continuous")
    assert not backend.streams
    assert backend.dispatch_mode == "continuous"


@pytest.mark.parametrize(("name", "value"), [("batch_size", 8), ("batch_timeout", 0.5), ("dispatch", "continuous")])
def test_the_batch_backend_s_own_fields_are_refused_by_name_for_async(name: str, value: object) -> None:
    with pytest.raises(ValidationError, match=rf"{name}: only the vllm_python_batch backend has it"):
        BackendConfig.model_validate({"kind": "vllm_python_async", "model": "m", name: value})


def test_a_validated_async_backend_validates_again_unchanged() -> None:
    """A sweep point's backend is the dumped backend validated again (config.sweep.apply_overrides)."""
    backend = BackendConfig(kind="vllm_python_async", model="m")
    assert BackendConfig.model_validate(backend.model_dump()) == backend
