"""docker/Dockerfile's two images, built and run for real with podman, with no registry and no network.

scripts/setup/images.sh (run by scripts/test) makes the inputs: a Debian bookworm base image built locally with
mmdebstrap, standing in for both python:3.11-slim and vLLM's image, and a wheelhouse of every pinned package,
which the build reads with PIP_NO_INDEX. podman builds with `--isolation chroot` and runs with runc and low
ulimits (what works in this sandbox; see README.md beside this file). Layers stay in podman's store, so a run
after an unchanged tree reuses them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.images]

ROOT = Path(__file__).resolve().parents[3]
USER_ID = "10001"
RUN_FLAGS = (
    "--rm",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--network",
    "none",
)


@dataclass(frozen=True)
class Images:
    operator: str
    runner: str


def podman(*arguments: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *arguments], capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT
    )


def build(target: str, base: str, wheelhouse: str) -> str:
    tag = f"localhost/batchmark-{target}:test"
    built = podman(
        "build",
        "--file",
        "docker/Dockerfile",
        "--isolation",
        "chroot",
        "--target",
        target,
        "--tag",
        tag,
        "--volume",
        f"{wheelhouse}:/wheelhouse:ro",
        "--build-arg",
        "PIP_NO_INDEX=1",
        "--build-arg",
        "PIP_FIND_LINKS=/wheelhouse",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--build-arg",
        f"VLLM_IMAGE={base}",
        "--build-arg",
        "REVISION=test",
        ".",
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return tag


@pytest.fixture(scope="module")
def images() -> Images:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: run scripts/setup/images.sh (scripts/test does)")
    located = subprocess.run(
        [str(ROOT / "scripts/setup/images.sh"), "--locate"], capture_output=True, text=True, check=False
    )
    assert located.returncode == 0, located.stderr
    base, wheelhouse = located.stdout.split()
    return Images(operator=build("operator", base, wheelhouse), runner=build("runner", base, wheelhouse))


def run(image: str, *arguments: str, entrypoint: str | None = None, read_only: bool = False) -> str:
    flags = [*RUN_FLAGS, *(["--entrypoint", entrypoint] if entrypoint else []), *(["--read-only"] if read_only else [])]
    result = podman("run", *flags, image, *arguments, timeout=300)
    assert result.returncode == 0, f"{arguments}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def inspect(image: str) -> dict[str, object]:
    result = podman("image", "inspect", image)
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)[0]
    return found


@pytest.mark.parametrize("target", ["operator", "runner"])
def test_images_run_as_a_non_root_user_with_oci_labels(images: Images, target: str) -> None:
    image = getattr(images, target)
    config = inspect(image)["Config"]
    assert isinstance(config, dict)
    assert config["User"] == USER_ID
    assert config["Entrypoint"] == ["batchmark"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == f"batchmark-{target}"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.version"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert run(image, "-u", entrypoint="id").strip() == USER_ID


def test_the_operator_image_has_the_operator_extra_and_no_engine(images: Images) -> None:
    # The operator's Deployment runs with a read-only root file system: so does this.
    assert "usage: batchmark" in run(images.operator, "--help", read_only=True)
    assert "usage: batchmark operator" in run(images.operator, "operator", "--help", read_only=True)
    assert "kind: CustomResourceDefinition" in run(images.operator, "crd", read_only=True)
    probe = (
        "import importlib.util as u; "
        "print(*(u.find_spec(m) is not None for m in ('kopf', 'kubernetes', 'vllm', 'torch')))"
    )
    assert run(images.operator, "-c", probe, entrypoint="python3", read_only=True).split() == [
        "True",
        "True",
        "False",
        "False",
    ]
    checked = run(images.operator, "check", entrypoint="pip", read_only=True)
    assert "No broken requirements found" in checked


def test_the_runner_image_runs_a_simulated_benchmark_as_its_user(images: Images) -> None:
    script = (
        "set -e; batchmark run --quiet --name image-test"
        " --backend kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0"
        " --data kind=synthetic_text,prompt_tokens=64,output_tokens=16"
        " --profile kind=throughput,max_concurrency=16 --constraint kind=max_requests,count=40"
        " --output results.json >/dev/null; stat -c %u results.json; cat results.json"
    )
    owner, _, body = run(images.runner, "-c", script, entrypoint="sh").partition("\n")
    assert owner == USER_ID  # written by the image's user, in its home
    report = json.loads(body)
    (benchmark,) = report["benchmarks"]
    assert benchmark["requests"]["completed"] == 40
    assert report["engine"]["simulated"] is True
