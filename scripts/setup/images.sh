#!/usr/bin/env bash
# What the image tests (tests/integration/images) need, none of it from an image registry (none is reachable
# here): podman with runc, a Debian bookworm base image made locally with mmdebstrap, and a wheelhouse of every
# pinned package, so that the Dockerfile's builds run with no network at all (PIP_NO_INDEX). Idempotent; the
# base image and the wheelhouse are cached under ~/.cache/batchmark/images (BATCHMARK_IMAGES_CACHE moves it).
# Prints nothing but a summary when everything is there.
# `--locate` installs nothing: it prints the base image, the wheelhouse, the CPU runner's wheelhouse and its base
# image (the tests' inputs), one per line, and fails when any is missing. `--packages` installs only the system packages (apt, with sudo), so that
# scripts/test can run the rest, downloads mostly, in the background.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${BATCHMARK_IMAGES_CACHE:-$HOME/.cache/batchmark/images}"
# The base's Debian packages: Python, and libnuma1, which vLLM's CPU kernels link (the CPU runner's Dockerfile
# stage installs it where its base lacks it; this base has it, so that the build needs no network).
base_packages=python3,python3-venv,libnuma1
base_key="$(echo "$base_packages" | sha256sum | cut -c1-8)"
base_image="localhost/batchmark-test-base:bookworm-$base_key"
# The CPU runner's base adds a C++ compiler and Python's headers: vLLM's CPU build compiles kernels with PyTorch's
# inductor (the Dockerfile's stage installs them where its base lacks them). A base of its own, so that the other
# images stay without them.
cpu_base_packages="$base_packages,g++,libpython3.11-dev"
cpu_base_key="$(echo "$cpu_base_packages" | sha256sum | cut -c1-8)"
cpu_base_image="localhost/batchmark-test-base:bookworm-cpu-$cpu_base_key"
# The wheelhouse is keyed by what decides its content: the pins and the build backend's requirement.
build_backend="$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')"
key="$( (cat docker/operator-requirements.txt docker/runner-constraints.txt; echo "$build_backend") | sha256sum | cut -c1-16)"
wheelhouse="$cache/wheelhouse-$key"
# The CPU runner's packages (vLLM's CPU build, PyTorch, Ray: ~3 GB), a wheelhouse of their own, keyed by their pins.
cpu_key="$(sha256sum docker/runner-cpu-requirements.txt | cut -c1-16)"
cpu_wheelhouse="$cache/wheelhouse-cpu-$cpu_key"
if [ "${1:-}" = --locate ]; then
    command -v podman >/dev/null && podman image exists "$base_image" && podman image exists "$cpu_base_image" \
        && [ -f "$wheelhouse/.complete" ] && [ -f "$cpu_wheelhouse/.complete" ] || {
        echo "the image build's inputs are missing: run scripts/setup/images.sh" >&2
        exit 1
    }
    printf '%s\n%s\n%s\n%s\n' "$base_image" "$wheelhouse" "$cpu_wheelhouse" "$cpu_base_image"
    exit 0
fi
mkdir -p "$cache"

# runc: crun (podman's default) fails here with "cgroups in hybrid mode not supported".
missing=()
for binary in podman mmdebstrap runc; do
    command -v "$binary" >/dev/null 2>&1 || missing+=("$binary")
done
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends podman mmdebstrap runc uidmap
fi
if [ "${1:-}" = --packages ]; then
    exit 0
fi

# The bases: Debian bookworm's minimal system with Python 3.11 and venv, as a tarball (~65 s, 225 MB) imported
# into podman's store. It stands in for both python:3.11-slim-bookworm and vLLM's image in the tests.
make_base() {  # tarball stem, packages, image; older tarballs of the same stem go
    local tarball="$cache/$1.tar"
    if [ ! -s "$tarball" ]; then
        mmdebstrap --quiet --format=tar --variant=minbase --include="$2" bookworm "$tarball.partial"
        mv "$tarball.partial" "$tarball"
    fi
    find "$cache" -maxdepth 1 -name "${1%-*}-????????.tar" ! -path "$tarball" -delete
    if ! podman image exists "$3"; then
        podman import --quiet "$tarball" "$3" >/dev/null
    fi
}
make_base "bookworm-$base_key" "$base_packages" "$base_image"
make_base "bookworm-cpu-$cpu_base_key" "$cpu_base_packages" "$cpu_base_image"

# The wheelhouse: every pinned package and the build backend, as wheels for this machine's Python (3.11, as
# bookworm's).
if [ ! -f "$wheelhouse/.complete" ]; then
    rm -rf "$wheelhouse"
    PIP_FIND_LINKS= .venv/bin/python -m pip wheel --quiet --wheel-dir "$wheelhouse" \
        -r docker/operator-requirements.txt -c docker/runner-constraints.txt $build_backend
    touch "$wheelhouse/.complete"
fi
# The CPU runner installs its complete lock with --no-deps: its wheels alone (the batchmark wheel is built with the
# first wheelhouse). Previous CPU wheelhouses go: each is 3 GB.
if [ ! -f "$cpu_wheelhouse/.complete" ]; then
    rm -rf "$cpu_wheelhouse"
    PIP_FIND_LINKS= .venv/bin/python -m pip wheel --quiet --no-deps --wheel-dir "$cpu_wheelhouse" \
        -r docker/runner-cpu-requirements.txt
    find "$cache" -maxdepth 1 -name 'wheelhouse-cpu-*' ! -path "$cpu_wheelhouse" -exec rm -rf {} +
    touch "$cpu_wheelhouse/.complete"
fi
echo "images: podman $(podman version --format '{{.Client.Version}}'), base $base_image (CPU runner's $cpu_base_image), wheelhouse $wheelhouse, CPU runner's $cpu_wheelhouse"
