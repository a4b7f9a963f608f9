"""pytest fixtures that give tests a real Kubernetes control plane.

Registered from tests/conftest.py with `pytest_plugins = ["tests.cluster.fixtures"]`.
Without the binaries (`scripts/setup/cluster.sh` builds them) the tests that use these fixtures are skipped,
unless BATCHMARK_REQUIRE_CLUSTER=1 (as in CI), where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.cluster import images
from tests.cluster.controlplane import (
    Binaries,
    ClusterBinariesMissingError,
    ControlPlane,
    locate_binaries,
    locate_runtime_binaries,
)
from tests.cluster.kueue import Kueue, locate_kueue

# What tests see: the control plane, with `kubeconfig`, `server`, `api_client()`, `kubectl()`, `helm()`,
# `start_node_agent()`, `stop_node_agent()` and `node_names`.
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


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """One control plane for the whole session, with fake GPU nodes and the node agent running."""
    binaries = required_binaries()
    # Under pytest's temporary folder, which keeps the logs of the last runs for post-mortems.
    control_plane = ControlPlane(tmp_path_factory.mktemp("kube-cluster"), binaries)
    try:
        control_plane.start()
        control_plane.start_node_agent()
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture(scope="session")
def container_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A control plane whose nodes are real kubelets over containerd (runtime="containers"): one GPU node and
    one plain node, holding the runner image built from the Dockerfile (`images.TAGS["runner"]`), for the
    whole session. A second control plane beside `kube_cluster`, whose nodes still run pods as processes."""
    binaries = required_binaries()
    try:
        locate_runtime_binaries()
    except ClusterBinariesMissingError as error:
        _skip_or_fail(error)
    try:
        runner = images.saved_archive(images.build("runner"))
    except images.ImageBuildError as error:
        _skip_or_fail(ClusterBinariesMissingError(str(error)))
    control_plane = ControlPlane(
        tmp_path_factory.mktemp("container-cluster"),
        binaries,
        gpu_node_names=("gpu-node-0",),
        cpu_node_names=("cpu-node-0",),
        runtime="containers",
    )
    try:
        control_plane.start()
        control_plane.load_images([runner])
        yield control_plane
    finally:
        control_plane.stop()


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
def container_namespace(container_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace on `container_cluster` for one test, deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    container_cluster.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    container_cluster.request("DELETE", f"/api/v1/namespaces/{name}")


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
