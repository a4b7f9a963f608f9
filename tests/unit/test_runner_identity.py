"""One identity for the images' user: the Dockerfile, the operator's benchmark Jobs and the chart agree on it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from batchmark.operator import children
from batchmark.operator.api import BatchBenchmarkSpec

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_default(name: str) -> int:
    (value,) = re.findall(rf"^ARG {name}=(\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    return int(value)


def test_the_dockerfile_builds_the_user_the_operator_runs_benchmarks_as() -> None:
    assert dockerfile_default("BATCHMARK_UID") == children.RUNNER_UID
    assert dockerfile_default("BATCHMARK_GID") == children.RUNNER_GID
    # Both stages run as those build arguments, numerically (runAsNonRoot can check a number only).
    stages = (ROOT / "Dockerfile").read_text().split("\nFROM ")[1:]
    users = [re.findall(r"^USER (.+)$", stage, re.MULTILINE) for stage in stages]
    assert [found for found in users if found] == [["${BATCHMARK_UID}:${BATCHMARK_GID}"]] * 2


def test_the_job_runs_as_the_image_user() -> None:
    example = yaml.safe_load((ROOT / "examples" / "simulated-throughput.yaml").read_text())
    job = children.job(children.Owner("ns", "qwen3", "uid-1"), BatchBenchmarkSpec.model_validate(example["spec"]))
    security = job["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsUser"] == children.RUNNER_UID
    assert security["runAsGroup"] == children.RUNNER_GID
    assert security["fsGroup"] == children.RUNNER_GID


def test_the_chart_runs_its_pods_as_the_image_user() -> None:
    expected = {"runAsUser": children.RUNNER_UID, "runAsGroup": children.RUNNER_GID, "fsGroup": children.RUNNER_GID}
    found: list[tuple[str, str, int]] = []
    for template in sorted((ROOT / "charts" / "batchmark" / "templates").rglob("*.yaml")):
        for key, value in re.findall(r"^\s*(runAsUser|runAsGroup|fsGroup):\s*(\S+)\s*$", template.read_text(), re.M):
            assert value.isdigit(), f"{template.name}: {key}: {value} is not a number"
            found.append((template.name, key, int(value)))
    assert found, "the chart sets no pod identity"
    assert [(name, key, expected[key]) for name, key, _ in found] == found
