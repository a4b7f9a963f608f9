"""spec.results.store and spec.baseline on real kubelets over containerd: benchmarks keep their runs on a
PersistentVolumeClaim, the runs outlive the resources, each names the runner image's digest its kubelet reported,
and a later run is judged against an earlier one (the Regressed condition, the status's verdict and the operator's
series), all in the runner image as built."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchmark.operator.controller.status import RUNNER_CONTAINER
from devtools.cluster.volumes import bind_local_volume, release_local_volume
from tests.cli import run_in_process
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import apply_stepped_benchmark, assert_succeeds_with_results, pod_of
from tests.integration.operator.installed import InstalledOperator

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

CLAIM = "results"
WHOLE_RUN = {"results.json", "report.html", "config.yaml", "fingerprint.json"}


@pytest.fixture
def results_claim(container_cluster: KubeCluster, container_namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The claim `results`, bound to a local PersistentVolume on gpu-node-0; its folder on this machine."""
    folder = tmp_path / "results"
    folder.mkdir(mode=0o755)
    bind_local_volume(container_cluster, container_namespace, CLAIM, folder, nodes=["gpu-node-0"])
    try:
        yield folder
    finally:
        container_cluster.kubectl(
            "delete", "bb", "--all", "-n", container_namespace, "--wait", "--timeout=120s", check=False
        )
        release_local_volume(container_cluster, container_namespace, CLAIM, wait=True)


def stored_benchmark(cluster: KubeCluster, namespace: str, name: str, step_seconds: float, **spec: Any) -> None:
    """A short stepped benchmark kept in the claim's store under nightly/."""
    store = {"store": {"claimName": CLAIM, "path": "nightly"}}
    apply_stepped_benchmark(cluster, namespace, name, step_seconds, store, **spec)


def kubelets_digest(cluster: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> str:
    """The digest of the runner image the benchmark's pod ran, from the imageID its kubelet reports (containerd's:
    sha256:... for an image imported into the node, NAME@sha256:... for one pulled), which the operator copied into
    the status."""
    pod = pod_of(cluster, namespace, name)
    assert pod is not None
    (runner,) = [each for each in pod.status.container_statuses or [] if each.name == RUNNER_CONTAINER]
    assert status["runnerImage"] == {"image": runner.image, "imageID": runner.image_id, "podName": pod.metadata.name}
    digest = str(runner.image_id).rsplit("@", 1)[-1]
    assert digest.startswith("sha256:"), runner.image_id
    return digest


def regressed(status: dict[str, Any]) -> dict[str, Any]:
    return next(condition for condition in status["conditions"] if condition["type"] == "Regressed")


def test_runs_outlive_their_benchmarks_and_a_regression_is_called(
    batchmark_operator: InstalledOperator, results_claim: Path, container_namespace: str
) -> None:
    cluster, namespace, store = batchmark_operator.cluster, container_namespace, results_claim / "nightly"
    stored_benchmark(cluster, namespace, "first", 0.01)
    first = assert_succeeds_with_results(cluster, namespace, "first")["status"]
    assert "Regressed" not in {condition["type"] for condition in first["conditions"]}
    digests = [kubelets_digest(cluster, namespace, "first", first)]

    stored_benchmark(cluster, namespace, "equal", 0.01, baseline="last")
    equal = assert_succeeds_with_results(cluster, namespace, "equal")["status"]
    assert equal["regression"]["baseline"] == first["runId"]
    assert (equal["regression"]["verdict"], regressed(equal)["status"]) == ("False", "False"), equal["regression"]
    assert regressed(equal)["reason"] == "NotRegressed"
    digests.append(kubelets_digest(cluster, namespace, "equal", equal))

    stored_benchmark(cluster, namespace, "slower", 0.03, baseline=first["runId"])
    slower = assert_succeeds_with_results(cluster, namespace, "slower")["status"]
    assert (slower["regression"]["verdict"], regressed(slower)["status"]) == ("True", "True"), slower["regression"]
    assert regressed(slower)["reason"] == "Regressed"
    assert slower["regression"]["change"] < -0.05
    assert slower["regression"]["pValue"] < 0.05
    assert regressed(slower)["message"] == slower["regression"]["reason"]
    digests.append(kubelets_digest(cluster, namespace, "slower", slower))
    metrics = batchmark_operator.metrics()
    labels = f'baseline="{first["runId"]}",name="slower",namespace="{namespace}"'
    series = f"batchmark_operator_benchmark_regressed{{{labels}}} 1.0"
    assert series in metrics, [line for line in metrics.splitlines() if "regressed" in line]

    # A baseline of another workload (longer prompts) is refused with the settings that differ: no verdict.
    longer = {"kind": "synthetic_text", "promptTokens": 64, "outputTokens": 16}
    stored_benchmark(cluster, namespace, "other", 0.01, baseline=first["runId"], data=longer)
    other = assert_succeeds_with_results(cluster, namespace, "other")["status"]
    assert (other["regression"]["verdict"], regressed(other)["status"]) == ("Unknown", "Unknown"), other["regression"]
    assert regressed(other)["reason"] == "NoVerdict"
    refusal = regressed(other)["message"]
    assert refusal.startswith(f"the baseline {first['runId']} is another workload: "), refusal
    assert "data.prompt_tokens: 32 against 64" in refusal
    digests.append(kubelets_digest(cluster, namespace, "other", other))

    # The resources go; their runs stay, listed from the claim's folder.
    deleted = cluster.kubectl(
        "delete", "bb", "first", "equal", "slower", "other", "-n", namespace, "--wait", "--timeout=120s"
    )
    assert deleted.returncode == 0, deleted.stderr
    listed = run_in_process(["history", "--store", str(store), "--format", "csv"])
    assert listed.code == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert [row.split(",")[1] for row in rows] == [first["runId"], equal["runId"], slower["runId"], other["runId"]]
    assert all(",simulated,True," in row for row in rows)
    # Each run whole, written by the runner's user, its fingerprint's stack naming the image its kubelet ran.
    for row, digest in zip(rows, digests, strict=True):
        folder = store / row.split(",")[-1]
        assert {path.name for path in folder.iterdir()} == {
            "results.json",
            "report.html",
            "config.yaml",
            "fingerprint.json",
        }
        stack = json.loads((folder / "fingerprint.json").read_text(encoding="utf-8"))["stack"]
        assert stack["image"]["digest"] == digest, stack
