"""One identity for the images' user: the Dockerfile, the operator's benchmark Jobs and the chart agree on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from batchmark.operator.controller import children
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults, RunnerIdentity
from batchmark.runner.contract import RUNNER_GID, RUNNER_UID

ROOT = Path(__file__).resolve().parents[3]


def dockerfile_default(name: str) -> int:
    (value,) = re.findall(rf"^ARG {name}=(\d+)$", (ROOT / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    return int(value)


def test_the_dockerfile_the_contract_and_the_chart_name_one_user() -> None:
    """The runner's UID and GID are written in three places that cannot import each other: the Dockerfile's build
    arguments, the contract (RUNNER_UID/RUNNER_GID, whence the operator's defaults) and the chart's values. Any
    one of them changed alone fails here."""
    values = yaml.safe_load((ROOT / "charts" / "batchmark" / "values.yaml").read_text())
    expected = {"runAsUser": RUNNER_UID, "runAsGroup": RUNNER_GID, "fsGroup": RUNNER_GID}
    written = {
        "Dockerfile": {
            "runAsUser": dockerfile_default("BATCHMARK_UID"),
            "runAsGroup": dockerfile_default("BATCHMARK_GID"),
        },
        "operator.securityContext": values["operator"]["securityContext"],
        "benchmarkDefaults.securityContext": values["benchmarkDefaults"]["securityContext"],
        "the operator's defaults": RunnerIdentity().pod_fields(),
    }
    differing = {
        where: ids
        for where, ids in written.items()
        if ids != {key: value for key, value in expected.items() if key in ids}
    }
    assert not differing, f"the runner's user is {expected} in the contract, not: {differing}"
    # Every image (the operator and both runners) runs as those build arguments, numerically (runAsNonRoot can
    # check a number only).
    users = [re.findall(r"^USER (.+)$", stage, re.MULTILINE) for stage in dockerfile_stages().values()]
    assert [found for found in users if found] == [["${BATCHMARK_UID}:${BATCHMARK_GID}"]] * 3


def dockerfile_stages() -> dict[str, str]:
    """The Dockerfile's stages by name, each its text after the FROM line."""
    stages = (ROOT / "docker" / "Dockerfile").read_text().split("\nFROM ")[1:]
    return {stage.split("\n", 1)[0].split(" AS ")[1].strip(): stage.split("\n", 1)[1] for stage in stages}


def test_both_runner_images_give_their_user_the_same_home_and_caches() -> None:
    """The CUDA and the CPU runner: the same user script, and the same variables naming home and every cache."""
    stages = dockerfile_stages()

    def environment(stage: str) -> str:
        (block,) = re.findall(r"^ENV PATH=.*?[^\\]\n", stages[stage], re.MULTILINE | re.DOTALL)
        return str(block)

    assert environment("runner") == environment("runner-cpu")
    for stage in ("runner", "runner-cpu"):
        assert 'sh /tmp/runner-user.sh "${BATCHMARK_UID}" "${BATCHMARK_GID}"' in stages[stage]


def test_the_job_runs_as_the_image_user() -> None:
    example = yaml.safe_load((ROOT / "examples" / "simulated-throughput.yaml").read_text())
    job = children.job(children.Owner("ns", "qwen3", "uid-1"), BatchBenchmarkSpec.model_validate(example["spec"]))
    security = job["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsUser"] == RUNNER_UID
    assert security["runAsGroup"] == RUNNER_GID
    assert security["fsGroup"] == RUNNER_GID


def job_security(identity: RunnerIdentity) -> dict[str, object]:
    example = yaml.safe_load((ROOT / "examples" / "simulated-throughput.yaml").read_text())
    spec = BatchBenchmarkSpec.model_validate(example["spec"])
    job = children.job(children.Owner("ns", "qwen3", "uid-1"), spec, None, identity)
    security: dict[str, object] = job["spec"]["template"]["spec"]["securityContext"]
    return security


def test_the_operators_defaults_give_benchmark_pods_an_arbitrary_uid_with_gid_0() -> None:
    defaults = OperatorDefaults.model_validate({"securityContext": {"runAsUser": 1234567, "runAsGroup": 0}})
    security = job_security(defaults.security_context)
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (1234567, 0, RUNNER_GID)
    assert security["runAsNonRoot"] is True


def test_null_ids_are_left_to_the_platform() -> None:
    nulls = {"runAsUser": None, "runAsGroup": None, "fsGroup": None}
    security = job_security(OperatorDefaults.model_validate({"securityContext": nulls}).security_context)
    assert security == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_root_is_refused_as_the_runners_user() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        OperatorDefaults.model_validate({"securityContext": {"runAsUser": 0}})
