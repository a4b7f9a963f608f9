import logging

import pytest
from pydantic import ValidationError

from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
from batchmark.runner.config.profiles import TransientPhaseConfig
from batchmark.runner.config.run import RunConfig

BASE = {
    "backend": {"kind": "vllm_python_batch", "model": "m", "engine": "simulated"},
    "data": {"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": 4},
    "profile": {"kind": "throughput"},
    "constraints": [{"kind": "max_requests", "count": 10}],
}


def test_defaults_match_the_seed() -> None:
    backend = VllmPythonBatchBackendConfig(model="m")
    assert backend.batch_size == 32
    assert backend.batch_timeout == 0.01
    assert backend.request_format == "default-template"
    assert backend.engine == "vllm"
    assert backend.vllm_config == {}


def test_top_level_model_wins_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        backend = VllmPythonBatchBackendConfig(model="a", vllm_config={"model": "b", "max_model_len": 64})
    assert backend.engine_args() == {"model": "a", "max_model_len": 64}
    assert "vllm_config.model='b' is ignored" in caplog.text


def test_accepts_camel_case_as_kubernetes_writes_it() -> None:
    config = RunConfig.model_validate(
        {
            **BASE,
            "backend": {"kind": "vllm_python_batch", "model": "m", "batchSize": 4, "vllmConfig": {"x": 1}},
            "sampleRequests": 3,
        }
    )
    assert config.backend.batch_size == 4
    assert config.backend.vllm_config == {"x": 1}
    assert config.sample_requests == 3


@pytest.mark.parametrize(
    ("change", "location"),
    [
        ({"backend": {"kind": "vllm_python_batch", "model": "m", "batch_size": 0}}, ("backend", "batch_size")),
        ({"backend": {"kind": "vllm_python_batch", "model": "m", "batch_timeout": 0}}, ("backend", "batch_timeout")),
        ({"backend": {"kind": "vllm_python_batch", "model": "m", "bogus": 1}}, ("backend", "bogus")),
        ({"profile": {"kind": "warp"}}, ("profile",)),
        ({"profile": {"kind": "constant", "rate": -1}}, ("profile", "constant", "rate")),
        ({"constraints": [{"kind": "max_duration", "seconds": 0}]}, ("constraints", 0, "max_duration", "seconds")),
    ],
)
def test_rejects_bad_values_naming_the_field(change: dict[str, object], location: tuple[object, ...]) -> None:
    with pytest.raises(ValidationError) as error:
        RunConfig.model_validate({**BASE, **change})
    assert error.value.errors()[0]["loc"][: len(location)] == location


def test_a_run_must_be_bounded() -> None:
    with pytest.raises(ValidationError, match="so that the run ends"):
        RunConfig.model_validate({**BASE, "constraints": [{"kind": "max_errors", "count": 1}]})


def test_cooldown_needs_something_to_count_back_from() -> None:
    with pytest.raises(ValidationError, match=r"cooldown\.seconds needs a max_duration"):
        RunConfig.model_validate({**BASE, "profile": {"kind": "throughput", "cooldown": {"seconds": 1}}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.1, {"fraction": 0.1}), (5, {"amount": 5.0}), ({"requests": 3}, {"requests": 3})],
)
def test_transient_phase_reads_guidellm_numbers(value: object, expected: dict[str, float]) -> None:
    phase = TransientPhaseConfig.model_validate(value)
    assert {key: val for key, val in phase.model_dump().items() if val is not None} == expected


@pytest.mark.parametrize("name", ["a" * 63, "qwen3-0.6b_batch.8", "A1"])
def test_name_accepts_kubernetes_label_values(name: str) -> None:
    assert RunConfig.model_validate({**BASE, "name": name}).name == name


@pytest.mark.parametrize("name", ["a" * 64, "-leading", "trailing.", "has space", "slash/ed", ""])
def test_name_refuses_what_is_not_a_label_value(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RunConfig.model_validate({**BASE, "name": name})
    assert caught.value.errors()[0]["loc"] == ("name",)
