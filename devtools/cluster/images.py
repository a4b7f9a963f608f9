"""The project's images (the operator, the runner, the CPU runner with vLLM's CPU build), built from the Dockerfile
with podman the way the tests build them (no registry and no network: the Debian base and the wheelhouse come from
scripts/setup/images.sh), and saved as archives that the containers runtime's nodes import.

podman keeps the layers, so a build after an unchanged tree takes seconds; a saved archive is kept per image
ID under ~/.cache/batchmark/images/archives (BATCHMARK_IMAGES_CACHE moves the root), the earlier ones of the
same image removed once no session has asked for them for an hour (two clones on one machine build different
images under the same tag). Builds and saves hold a lock (one file in that root): test sessions or pytest-xdist
workers that need an image at the same time build it one after the other (the later one from podman's layers, in
seconds), and `built_archive` holds it from the build to the saved archive, so that the tag it saves is the
one it built.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# How long an archive no session has asked for stays beside the newest of its image.
ARCHIVE_KEPT_SECONDS = 3600
TAGS = {
    "operator": "localhost/batchmark-operator:test",
    "runner": "localhost/batchmark-runner:test",
    "runner-cpu": "localhost/batchmark-runner-cpu:test",
}


def default_names(target: str) -> list[str]:
    """The names under which the nodes also hold the image: those the chart's values (`batchmark-runner` and
    `batchmark-operator` at the chart's appVersion, Docker Hub's library as a container runtime reads a bare
    name) and the operator's default runner image name, so that manifests written by them run unchanged."""
    from batchmark.operator.resource.api import DEFAULT_CPU_IMAGE, DEFAULT_IMAGE

    names = [f"docker.io/library/{chart_image(target)}"]
    operators_default = {"runner": DEFAULT_IMAGE, "runner-cpu": DEFAULT_CPU_IMAGE}.get(target)
    if operators_default is not None:
        names.append(operators_default)
    return names


def chart_image(target: str) -> str:
    """The image name the chart's values give `target` (operator, runner or runner-cpu):
    `batchmark-<target>:<appVersion>`."""
    chart = yaml.safe_load((ROOT / "charts" / "batchmark" / "Chart.yaml").read_text())
    return f"batchmark-{target}:{chart['appVersion']}"


def cache_root() -> Path:
    return Path(os.environ.get("BATCHMARK_IMAGES_CACHE") or Path.home() / ".cache" / "batchmark" / "images")


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Held by one process of the machine at a time (released when it exits, however it exits)."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / "images.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# Every place the runner image's user writes besides its working directory: home and the caches of vLLM,
# PyTorch, Triton and Hugging Face, by the variables the image sets.
CACHE_VARIABLES = (
    "HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "HF_HOME",
    "VLLM_CACHE_ROOT",
    "VLLM_CONFIG_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
)


def write_every_cache() -> str:
    """A shell command that writes a file in each cache folder, making it where absent as the libraries do."""
    return " && ".join(f'mkdir -p "${variable}" && touch "${variable}/written"' for variable in CACHE_VARIABLES)


class ImageBuildError(RuntimeError):
    """podman or the build's inputs are missing, or the build failed; the message says which."""


def podman(*arguments: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *arguments], capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT
    )


def build_inputs() -> tuple[str, str, str, str]:
    """The locally made base image, the wheelhouse, the CPU runner's wheelhouse and its base image (with a C++
    compiler); ImageBuildError when scripts/setup/images.sh has not run."""
    if shutil.which("podman") is None:
        raise ImageBuildError("podman is not installed: run scripts/setup/images.sh (scripts/test does)")
    located = subprocess.run(
        [str(ROOT / "scripts" / "setup" / "images.sh"), "--locate"], capture_output=True, text=True, check=False
    )
    if located.returncode != 0:
        raise ImageBuildError(located.stderr.strip())
    base, wheelhouse, cpu_wheelhouse, cpu_base = located.stdout.split()
    return base, wheelhouse, cpu_wheelhouse, cpu_base


def built_archive(target: str) -> Path:
    """The Dockerfile's `target` built and saved as an archive, in one hold of the lock."""
    with exclusive():
        return _saved_archive(_build(target))


def save_command(target: str) -> tuple[list[str], dict[str, list[str]]]:
    """The Dockerfile's `target` built, the command that writes it to its standard output as a `podman save`
    archive, and the names the nodes are to hold it under (ControlPlane.load_saved_image): the archive carries a
    tag made of its image ID, which no later build moves (the test tag does, when another clone builds), so the
    command saves this build whenever it runs; the test tag and default_names are added on the node."""
    with exclusive():
        tag = _build(target)
        inspected = podman("image", "inspect", "--format", "{{.Id}}", tag)
        if inspected.returncode != 0:
            raise ImageBuildError(inspected.stderr.strip())
        repository = tag.rsplit(":", 1)[0]
        pinned = f"{repository}:{inspected.stdout.strip()[:16]}"
        tagged = podman("tag", tag, pinned)
        if tagged.returncode != 0:
            raise ImageBuildError(tagged.stderr.strip())
        # The earlier builds' pinned tags would keep each of them in podman's store (7 GB for the CPU runner).
        listed = podman("images", "--format", "{{.Repository}}:{{.Tag}}", repository)
        for name in listed.stdout.split():
            if name != pinned and re.fullmatch(rf"{re.escape(repository)}:[0-9a-f]{{16}}", name):
                podman("rmi", name)
    save = ["podman", "save", "--format", "docker-archive", pinned]
    return save, {pinned: [tag, *default_names(target)]}


def build(target: str) -> str:
    """Build the Dockerfile's `target` (operator, runner or runner-cpu) on the local base; its tag."""
    with exclusive():
        return _build(target)


def _build(target: str) -> str:
    base, wheelhouse, cpu_wheelhouse, cpu_base = build_inputs()
    if target == "runner-cpu":
        base = cpu_base
    tag = TAGS[target]
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
        "--volume",
        f"{cpu_wheelhouse}:/wheelhouse-cpu:ro",
        "--build-arg",
        "PIP_NO_INDEX=1",
        "--build-arg",
        "PIP_FIND_LINKS=/wheelhouse /wheelhouse-cpu",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--build-arg",
        f"VLLM_IMAGE={base}",
        "--build-arg",
        "REVISION=test",
        ".",
    )
    if built.returncode != 0:
        raise ImageBuildError(f"podman build --target {target} failed:\n{built.stdout[-4000:]}{built.stderr[-4000:]}")
    return tag


def _saved_archive(tag: str) -> Path:
    """The image as a `podman save` archive (docker-archive: it carries the image's name), saved once per ID."""
    inspected = podman("image", "inspect", "--format", "{{.Id}}", tag)
    if inspected.returncode != 0:
        raise ImageBuildError(inspected.stderr.strip())
    image_id = inspected.stdout.strip()[:16]
    stem = tag.rsplit("/", 1)[-1].replace(":", "-")
    folder = cache_root() / "archives"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{stem}-{image_id}.tar"
    if not archive.exists():
        partial = archive.with_suffix(f".partial.{os.getpid()}")
        saved = podman("save", "--format", "docker-archive", "--output", str(partial), tag)
        if saved.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ImageBuildError(f"podman save {tag} failed: {saved.stderr.strip()}")
        partial.replace(archive)
    # Its time is its last use: an archive another clone's session saved may still be on its way into that
    # session's nodes (a removal mid-import failed it with "no such file"); one unused for an hour is not.
    os.utime(archive)
    for older in folder.glob(f"{stem}-*.tar"):
        if older != archive and time.time() - older.stat().st_mtime > ARCHIVE_KEPT_SECONDS:
            older.unlink(missing_ok=True)
    return archive
