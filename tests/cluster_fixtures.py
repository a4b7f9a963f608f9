"""pytest fixtures that give tests a real Kubernetes control plane.

Registered from tests/conftest.py with `pytest_plugins = ["tests.cluster_fixtures"]`.
Without the binaries (`scripts/setup/cluster.sh` builds them) the tests that use these fixtures are skipped,
unless BATCHMARK_REQUIRE_CLUSTER=1 (as in CI), where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from devtools.cluster import images
from devtools.cluster.controlplane import (
    Binaries,
    ClusterBinariesMissingError,
    ControlPlane,
    locate_binaries,
    locate_runtime_binaries,
)
from devtools.cluster.jobset import JobSet, locate_jobset
from devtools.cluster.kueue import Kueue, locate_kueue

# What tests see: the control plane, with `kubeconfig`, `server`, `api_client()`, `kubectl()`, `helm()`,
# `load_images()` and `node_names`.
KubeCluster = ControlPlane


def _skip_or_fail(error: ClusterBinariesMissingError) -> NoReturn:
    if os.environ.get("BATCHMARK_REQUIRE_CLUSTER") == "1":
        pytest.fail(str(error))
    pytest.skip(str(error))


def required_binaries() -> Binaries:
    """The built control-plane binaries; without them the calling test is skipped (fails in CI)."""
    try:
        return locate_binaries()
    except ClusterBinariesMissingError as error:
        _skip_or_fail(error)


def required_runtime() -> None:
    """The containers runtime's binaries; without them the calling test is skipped (fails in CI)."""
    try:
        locate_runtime_binaries()
    except ClusterBinariesMissingError as error:
        _skip_or_fail(error)


def built_image(target: str) -> Path:
    """The Dockerfile's `target` built (seconds when the tree is unchanged) and saved as an archive; without
    podman or the build's inputs the calling test is skipped (fails in CI)."""
    try:
        return images.built_archive(target)
    except images.ImageBuildError as error:
        _skip_or_fail(ClusterBinariesMissingError(str(error)))


def load_saved_image(cluster: KubeCluster, target: str) -> str:
    """`load_project_image` for an image of several GB (the CPU runner's): streamed from podman onto the untainted
    nodes (where CPU benchmarks run) with no archive on disk; its tag."""
    try:
        save, names = images.save_command(target)
    except images.ImageBuildError as error:
        _skip_or_fail(ClusterBinariesMissingError(str(error)))
    cluster.load_saved_image(save, names, untainted_only=True)
    return images.TAGS[target]


def load_project_image(cluster: KubeCluster, target: str) -> str:
    """Build `target` (operator, runner or runner-cpu) and put it on the nodes of `cluster`, also under the names the
    chart and the operator use by default (images.default_names), so that no test needs to name it; its tag.
    The operator's image goes to the untainted nodes alone: its Deployment tolerates no taint."""
    names = {images.TAGS[target]: images.default_names(target)}
    cluster.load_images([built_image(target)], names, untainted_only=target == "operator")
    return images.TAGS[target]


def start_container_cluster(
    run_directory: Path,
    gpu_node_names: tuple[str, ...] = ("gpu-node-0", "gpu-node-1"),
    cpu_node_names: tuple[str, ...] = ("cpu-node-0",),
    runner: bool = True,
) -> KubeCluster:
    """A started control plane whose nodes are real kubelets over containerd, holding the runner image (unless
    `runner` is False: a cluster whose benchmarks run in another image)."""
    binaries = required_binaries()
    required_runtime()
    archive = built_image("runner") if runner else None
    control_plane = ControlPlane(run_directory, binaries, gpu_node_names, cpu_node_names, runtime="containers")
    try:
        control_plane.start()
        if archive is not None:
            control_plane.load_images([archive], {images.TAGS["runner"]: images.default_names("runner")})
    except BaseException:
        control_plane.stop()
        raise
    return control_plane


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """One control plane for the whole session: real kubelets over containerd as its nodes (gpu-node-0 and
    gpu-node-1 with fake GPUs, cpu-node-0), holding the runner image built from the Dockerfile under its test tag
    and the names the operator and the chart use by default."""
    # Under pytest's temporary folder, which keeps the logs of the last runs for post-mortems.
    control_plane = start_container_cluster(tmp_path_factory.mktemp("kube-cluster"))
    try:
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture(scope="session")
def operator_image(kube_cluster: KubeCluster) -> str:
    """The operator image built from the Dockerfile and put on the session's nodes (for `helm install`)."""
    return load_project_image(kube_cluster, "operator")


@pytest.fixture(scope="session")
def container_cluster(kube_cluster: KubeCluster) -> KubeCluster:
    """The session's control plane (its nodes are real kubelets over containerd); the name tests of the
    containers runtime use."""
    return kube_cluster


def fresh_namespace(cluster: KubeCluster) -> Iterator[str]:
    """A namespace of its own on ``cluster``, deleted (with everything in it) when the generator closes."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    cluster.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted (with everything in it) afterwards."""
    yield from fresh_namespace(kube_cluster)


@pytest.fixture
def container_namespace(kube_namespace: str) -> str:
    """A fresh namespace on the session's control plane for one test (the name tests of the containers runtime
    use)."""
    return kube_namespace


@pytest.fixture(scope="session")
def kueue(kube_cluster: KubeCluster) -> Iterator[Kueue]:
    """Kueue's manager running against the session's control plane, its CRDs installed, from the first test
    that asks for it to the end of the session. Its cluster-scoped objects (ClusterQueues, ResourceFlavors,
    WorkloadPriorityClasses) are shared by all tests: each test names its own uniquely and deletes them."""
    try:
        binaries = locate_kueue()
    except ClusterBinariesMissingError as error:
        _skip_or_fail(error)
    manager = Kueue(kube_cluster, binaries)
    try:
        manager.start()
        yield manager
    finally:
        manager.stop()


@pytest.fixture(scope="session")
def jobset(kube_cluster: KubeCluster) -> Iterator[JobSet]:
    """JobSet's manager running against the session's control plane, its CRD installed, from the first test
    that asks for it to the end of the session (its JobSets are namespaced: each test's go with its namespace).
    Independent of `kueue`: Kueue installs JobSet's CRD itself, and either may start first."""
    try:
        binaries = locate_jobset()
    except ClusterBinariesMissingError as error:
        _skip_or_fail(error)
    manager = JobSet(kube_cluster, binaries)
    try:
        manager.start()
        yield manager
    finally:
        manager.stop()
