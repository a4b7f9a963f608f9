"""docker/Dockerfile's two images, built and run for real with podman, with no registry and no network.

scripts/setup/images.sh (run by scripts/test) makes the inputs: a Debian bookworm base image built locally with
mmdebstrap, standing in for both python:3.11-slim and vLLM's image, and a wheelhouse of every pinned package,
which the build reads with PIP_NO_INDEX (devtools/cluster/images.py builds them). podman builds with
`--isolation chroot` and runs with runc and low ulimits (what works in this sandbox; see README.md beside this
file). Layers stay in podman's store, so a run after an unchanged tree reuses them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from batchmark.runner.contract import RUNNER_GID, RUNNER_UID
from devtools.cluster import images as project_images

pytestmark = [pytest.mark.integration, pytest.mark.images]

USER_ID = str(RUNNER_UID)
# An arbitrary UID with GID 0, as OpenShift's restricted policy runs a container: it has no passwd entry.
ARBITRARY_USER = "1000640000:0"
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


@pytest.fixture(scope="module")
def images() -> Images:
    try:
        return Images(operator=project_images.build("operator"), runner=project_images.build("runner"))
    except project_images.ImageBuildError as error:
        pytest.fail(str(error))


def run(
    image: str, *arguments: str, entrypoint: str | None = None, read_only: bool = False, user: str | None = None
) -> str:
    flags = [
        *RUN_FLAGS,
        *(["--entrypoint", entrypoint] if entrypoint else []),
        *(["--read-only"] if read_only else []),
        *(["--user", user] if user else []),
    ]
    result = project_images.podman("run", *flags, image, *arguments, timeout=300)
    assert result.returncode == 0, f"{arguments}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def inspect(image: str) -> dict[str, object]:
    result = project_images.podman("image", "inspect", image)
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)[0]
    return found


@pytest.mark.parametrize("target", ["operator", "runner"])
def test_images_run_as_a_non_root_user_with_oci_labels(images: Images, target: str) -> None:
    image = getattr(images, target)
    config = inspect(image)["Config"]
    assert isinstance(config, dict)
    assert config["User"] == f"{RUNNER_UID}:{RUNNER_GID}"
    assert config["Entrypoint"] == ["batchmark"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == f"batchmark-{target}"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.version"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert run(image, "-u", entrypoint="id").strip() == USER_ID
    assert run(image, "-g", entrypoint="id").strip() == str(RUNNER_GID)


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


@pytest.mark.parametrize("user", [None, ARBITRARY_USER], ids=["image-user", "arbitrary-uid-gid-0"])
def test_the_runner_writes_its_home_and_caches(images: Images, user: str | None) -> None:
    # Writes a file in each cache folder (made if absent, as the libraries do) and in the working directory.
    who = "python3 -c 'import getpass; print(getpass.getuser())'; id -u"
    script = f"set -e; {project_images.write_every_cache()}; touch ./written; {who}"
    name, uid = run(images.runner, "-c", script, entrypoint="sh", user=user).split()
    assert uid == (user or USER_ID).split(":")[0]
    assert name == "batchmark"  # PyTorch names its caches after the user, which an arbitrary UID lacks
