"""`batchmark results` against the real API server: the kubeconfig's context picks the namespace, a benchmark that
is not there or has not finished is named, and the report comes back whole. No operator runs: the BatchBenchmark
that `batchmark manifest` prints is applied, and its finished status and results ConfigMap are written as the
runner writes them.

The session's operator (started by other modules' tests) watches every namespace of the session's control plane
and would run these benchmarks itself, racing the statuses written here; so this module has a control plane of
its own, with the CRD and no operator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.runner.observe.statuswriter import report_config_map_data
from batchmark.runner.results.outputs import load_report
from devtools.cluster.controlplane import ControlPlane
from tests.cli import run_in_process
from tests.cluster_fixtures import KubeCluster, fresh_namespace, required_binaries
from tests.integration.operator.conftest import kubectl_apply, with_the_crd
from tests.integration.runner.harness import run_args

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(scope="module")
def batchmark_crd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A control plane of this module's own, with the CRD applied and no operator (nor nodes: nothing here runs a
    pod) acting on it."""
    control_plane = ControlPlane(tmp_path_factory.mktemp("results-cluster"), required_binaries(), runtime="no-nodes")
    try:
        control_plane.start()
        yield with_the_crd(control_plane)
    finally:
        control_plane.stop()


@pytest.fixture
def kube_namespace(batchmark_crd: KubeCluster) -> Iterator[str]:
    """A fresh namespace of this module's control plane."""
    yield from fresh_namespace(batchmark_crd)


def kubeconfig_in(cluster: KubeCluster, namespace: str | None, path: Path) -> Path:
    """The admin kubeconfig with its context set to ``namespace`` (None: no namespace, as kubectl's default)."""
    config: dict[str, Any] = json.loads(cluster.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"].pop("namespace", None)
        if namespace is not None:
            context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def finished_benchmark(cluster: KubeCluster, namespace: str, name: str, tmp_path: Path, phase: str) -> Path:
    """A BatchBenchmark as `manifest` prints it, its status and results ConfigMap as a finished run leaves them;
    the report's file."""
    local = tmp_path / "local.json"
    ran = run_in_process(run_args(outputs=[local]))
    assert ran.code == 0, ran.stderr
    manifest = run_in_process(["manifest", *run_args()[1:], "--name", name])
    assert manifest.code == 0, manifest.stderr
    assert kubectl_apply(cluster, namespace, manifest.stdout).returncode == 0
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-results"},
        **report_config_map_data(load_report(local)),
    }
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map)
    cluster.request(
        "PATCH",
        f"/apis/batchmark.dev/v1alpha1/namespaces/{namespace}/batchbenchmarks/{name}/status",
        {"status": {"phase": phase, "resultsConfigMap": f"{name}-results"}},
        content_type=MERGE_PATCH,
    )
    return local


def test_results_takes_the_namespace_of_the_kubeconfig_context(
    batchmark_crd: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    local = finished_benchmark(batchmark_crd, kube_namespace, "done", tmp_path, "Succeeded")
    fetched = tmp_path / "fetched.json"
    kubeconfig = kubeconfig_in(batchmark_crd, kube_namespace, tmp_path / "in-namespace.kubeconfig")
    got = run_in_process(["results", "done", "--kubeconfig", str(kubeconfig), "-o", str(fetched)])
    assert got.code == 0, got.stderr
    assert load_report(fetched) == load_report(local)
    # Another context namespace: the benchmark is not there, and the message says where it looked.
    elsewhere = kubeconfig_in(batchmark_crd, None, tmp_path / "default.kubeconfig")
    missing = run_in_process(["results", "done", "--kubeconfig", str(elsewhere)])
    assert missing.code == 2
    assert f"no BatchBenchmark done in namespace default on {batchmark_crd.server}" in missing.message
    # -n wins over the context.
    assert run_in_process(["results", "done", "-n", kube_namespace, "--kubeconfig", str(elsewhere)]).code == 0


def test_results_of_an_unfinished_benchmark_and_an_unwritable_output(
    batchmark_crd: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    finished_benchmark(batchmark_crd, kube_namespace, "running", tmp_path, "Running")
    kubeconfig = kubeconfig_in(batchmark_crd, kube_namespace, tmp_path / "kubeconfig")
    unfinished = run_in_process(["results", "running", "--kubeconfig", str(kubeconfig)])
    assert unfinished.code == 2
    assert f"{kube_namespace}/running has not finished (phase Running)" in unfinished.stderr
    # The output is checked before the cluster is asked: the message is about the output, not the phase.
    unwritable = run_in_process(["results", "running", "--kubeconfig", str(kubeconfig), "-o", "/proc/r.json"])
    assert unwritable.code == 2
    assert "--output: /proc/r.json" in unwritable.stderr

    # Finished, but its ConfigMap holds something else: one line, not the validation library's dump.
    cluster, path = batchmark_crd, f"/api/v1/namespaces/{kube_namespace}/configmaps/running-results"
    cluster.request("PATCH", path, {"data": {"report.json": '{"a": 1}'}, "binaryData": None}, content_type=MERGE_PATCH)
    cluster.request(
        "PATCH",
        f"/apis/batchmark.dev/v1alpha1/namespaces/{kube_namespace}/batchbenchmarks/running/status",
        {"status": {"phase": "Failed"}},
        content_type=MERGE_PATCH,
    )
    unreadable = run_in_process(["results", "running", "--kubeconfig", str(kubeconfig)])
    assert unreadable.code == 2
    error = unreadable.stderr
    assert f"ConfigMap {kube_namespace}/running-results holds no readable report" in error, error
    assert "errors.pydantic.dev" not in error
    assert len(error.strip().splitlines()) == 1, error
