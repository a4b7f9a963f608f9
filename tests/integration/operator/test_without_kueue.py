"""A benchmark naming a Kueue queue where Kueue is not installed ends Failed at once, saying so; one over several
pods where JobSet is not installed too, before anything is created.

A control plane of its own, with one node for the operator as shipped: the session's has Kueue's CRDs (and with
them JobSet's) once any Kueue test ran. Being on its own control plane, it runs beside the session's tests
(tests/xdist_scheduling.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster_fixtures import load_project_image, start_container_cluster
from tests.integration.operator.conftest import wait_for_phase, with_the_crd
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.test_kueue_queueing import apply, queued_run

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]


def test_without_kueue_a_queue_name_is_refused(tmp_path: Path) -> None:
    cluster = start_container_cluster(tmp_path / "cluster", gpu_node_names=())
    try:
        load_project_image(cluster, "operator")
        operator = InstalledOperator(with_the_crd(cluster), tmp_path / "operator")
        operator.install()
        apply(cluster, "default", queued_run("queued", seconds=1, queue="gpus"))
        fleet = queued_run("fleet", seconds=1, parallelism={"replicas": 2})
        del fleet["spec"]["queueName"]
        apply(cluster, "default", fleet)
        status = wait_for_phase(cluster, "default", "queued", {"Failed"})["status"]
        refused = wait_for_phase(cluster, "default", "fleet", {"Failed"})["status"]
        jobs = cluster.kubectl("get", "jobs", "-n", "default", "-o", "name").stdout.split()
        operator.assert_alive()
    finally:
        cluster.stop()
    assert status["reason"] == "KueueNotInstalled"
    assert "Kueue is not installed" in status["message"]
    assert "queueName" in status["message"]
    assert refused["reason"] == "InvalidConfig"
    assert refused["message"].startswith("spec.parallelism: 2 replicas over 2 pods run as a JobSet")
    assert "which this cluster does not serve" in refused["message"]
    assert jobs == []
