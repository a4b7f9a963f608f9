"""Fixtures of the local cluster's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import OperatorProcess, with_the_crd


@pytest.fixture(scope="module")
def operator(container_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The CRD applied, and the operator running (as a process, as the operator's e2e tests run it) for one
    module."""
    process = OperatorProcess(with_the_crd(container_cluster), tmp_path_factory.mktemp("operator") / "operator.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()
