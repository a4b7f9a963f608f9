"""`spec.modelCache.claimName` on real kubelets over containerd (devtools/cluster, runtime="containers"): a
PersistentVolumeClaim bound to a local PersistentVolume on the GPU node is the benchmark pod's Hugging Face cache,
made writable for the runner's user by the pod's fsGroup, as on a cluster whose volumes are provisioned by root."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchmark.operator.controller.status import RUNNER_CONTAINER
from batchmark.runner.contract import RUNNER_GID, RUNNER_UID
from devtools.cluster.volumes import bind_local_volume, release_local_volume
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import apply_watched_benchmark, assert_succeeds_with_results, running_pod
from tests.integration.operator.installed import InstalledOperator

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

MOUNT_PATH = "/models"
# A model as an earlier run left it in the cache (huggingface_hub's layout), owned by root as a copy onto the
# volume by an admin would leave it.
SEEDED = Path("hub") / "models--Qwen--Qwen3-0.6B" / "refs" / "main"


@pytest.fixture
def cache_operator(batchmark_operator: InstalledOperator) -> InstalledOperator:
    """The session's operator: the chart's default identity for benchmark pods (UID, GID and fsGroup 10001)."""
    return batchmark_operator


@pytest.fixture
def model_cache_claim(container_cluster: KubeCluster, container_namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The PersistentVolumeClaim `model-cache`, bound to a local PersistentVolume on gpu-node-0 whose folder on
    this machine (the node's disk) is yielded: root's, mode 0755, as a static provisioner makes it."""
    folder = tmp_path / "model-cache"
    (folder / SEEDED).parent.mkdir(parents=True)
    (folder / SEEDED).write_text("0123456789abcdef")
    folder.chmod(0o755)
    cluster, namespace = container_cluster, container_namespace
    bind_local_volume(cluster, namespace, "model-cache", folder, nodes=["gpu-node-0"])
    try:
        yield folder
    finally:
        # The claim's protection finalizer holds it while a pod uses it: the benchmark (Job, pod) goes first.
        cluster.kubectl("delete", "bb", "--all", "-n", namespace, "--wait", "--timeout=120s", check=False)
        release_local_volume(cluster, namespace, "model-cache", wait=True)


def test_the_model_cache_claim_is_the_pods_hugging_face_cache_written_by_its_user(
    cache_operator: InstalledOperator, model_cache_claim: Path, container_namespace: str
) -> None:
    cluster, namespace, name, folder = cache_operator.cluster, container_namespace, "cached", model_cache_claim
    apply_watched_benchmark(cluster, namespace, name, modelCache={"claimName": "model-cache", "mountPath": MOUNT_PATH})
    pod = running_pod(cluster, namespace, name)
    assert pod.spec.node_name == "gpu-node-0"  # where the volume is

    # In the pod, as its user: HF_HOME is the claim, the model cached earlier is there, and new files go there.
    script = (
        'set -e; echo "$HF_HOME"; cat "$HF_HOME/hub/models--Qwen--Qwen3-0.6B/refs/main"; echo;'
        ' mkdir -p "$HF_HOME/hub/.locks/models--Qwen--Qwen3-0.6B" "$HF_HOME/datasets";'
        ' echo "$(id -u)" > "$HF_HOME/hub/written-by-the-run"; echo written'
    )
    ran = cluster.kubectl(
        "exec", "-n", namespace, pod.metadata.name, "-c", RUNNER_CONTAINER, "--", "sh", "-c", script, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [MOUNT_PATH, "0123456789abcdef", "written"]

    assert_succeeds_with_results(cluster, namespace, name)

    # On the node's disk: written by the runner's user, in the group the kubelet gave the volume (fsGroup), which
    # also made the folder root had made group-writable.
    written = folder / "hub" / "written-by-the-run"
    assert written.read_text().strip() == str(RUNNER_UID)
    assert (written.stat().st_uid, written.stat().st_gid) == (RUNNER_UID, RUNNER_GID)
    assert (folder / "hub" / ".locks" / "models--Qwen--Qwen3-0.6B").is_dir()
    assert (folder / "datasets").is_dir()
    assert folder.stat().st_uid == 0
    assert folder.stat().st_gid == RUNNER_GID
    assert folder.stat().st_mode & stat.S_IWGRP
    assert os.stat(folder / SEEDED).st_gid == RUNNER_GID
