"""The operator–runner contract: every status field has exactly one writer, and each side keeps to its own."""

from __future__ import annotations

import pytest

from batchmark.operator.controller import children
from batchmark.operator.resource.api import BatchBenchmarkSpec, BatchBenchmarkStatus
from batchmark.runner import contract
from batchmark.runner.observe.statuswriter import StatusTarget


def status_fields() -> set[str]:
    return {field.alias or name for name, field in BatchBenchmarkStatus.model_fields.items()}


def test_every_status_field_has_one_writer() -> None:
    assert contract.RUNNER_STATUS_FIELDS.isdisjoint(contract.OPERATOR_STATUS_FIELDS)
    assert status_fields() == contract.RUNNER_STATUS_FIELDS | contract.OPERATOR_STATUS_FIELDS


def test_the_operator_falls_back_only_to_the_runners_end_of_run_fields() -> None:
    assert contract.OPERATOR_FALLBACK_FIELDS <= contract.RUNNER_STATUS_FIELDS
    assert "progress" not in contract.OPERATOR_FALLBACK_FIELDS


def test_a_write_to_the_other_sides_field_is_refused_by_name() -> None:
    contract.check_status_writes("runner", ["progress", "engine"], contract.RUNNER_STATUS_FIELDS)
    with pytest.raises(contract.NotOwnedStatusFieldError, match=r"the runner may not write status field\(s\) phase"):
        contract.check_status_writes("runner", ["progress", "phase"], contract.RUNNER_STATUS_FIELDS)


def test_the_pod_the_operator_writes_is_the_one_the_runner_reads() -> None:
    owner = children.Owner(namespace="team", name="qwen3", uid="uid-1")
    spec = BatchBenchmarkSpec.model_validate(
        {
            "backend": {"kind": "vllm_python_batch", "model": "Qwen/Qwen3-0.6B", "engine": "simulated"},
            "data": {"kind": "synthetic_text", "promptTokens": 8, "outputTokens": 8},
            "profile": {"kind": "synchronous"},
            "constraints": [{"kind": "max_requests", "count": 4}],
        }
    )
    container = children.job(owner, spec)["spec"]["template"]["spec"]["containers"][0]
    environment = {entry["name"]: entry.get("value", "from the pod") for entry in container["env"]}
    assert set(contract.POD_ENVIRONMENT) <= set(environment)
    target = StatusTarget.from_environment(environment)
    assert target is not None
    assert (target.namespace, target.name, target.uid) == ("team", "qwen3", "uid-1")
    assert target.results_config_map == f"{environment[contract.ENV_POD]}-results"  # the runner creates it
    assert str(target.termination_message_path) == contract.TERMINATION_MESSAGE_PATH
    assert container["terminationMessagePath"] == contract.TERMINATION_MESSAGE_PATH
    assert container["command"][:4] == ["batchmark", "run", "--config", contract.CONFIG_PATH]
    assert children.config_map(owner, spec.run_config("qwen3"))["data"].keys() == {contract.CONFIG_KEY}
