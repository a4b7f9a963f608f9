"""Fixtures of the operator's tests: the CRD applied once to the session's control plane, and the operator as shipped
(installed.py) installed once on it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml"


@pytest.fixture(scope="session")
def batchmark_crd(kube_cluster: KubeCluster) -> KubeCluster:
    """The control plane with the BatchBenchmark CRD applied and established."""
    return with_the_crd(kube_cluster)


def with_the_crd(kube_cluster: KubeCluster) -> KubeCluster:
    """Apply the BatchBenchmark CRD to ``kube_cluster`` and wait until kubectl can use it."""
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))

    def established() -> bool:
        condition = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        result = kube_cluster.kubectl("get", "crd/batchbenchmarks.batchmark.dev", "-o", condition, check=False)
        return result.stdout.strip() == "True"

    wait_for("the CRD to be established", established, 60)
    # Established is not yet served by discovery, through which kubectl resolves `bb`.
    wait_for("bb in discovery", lambda: kube_cluster.kubectl("get", "bb", "-A", check=False).returncode == 0, 60)
    return kube_cluster


def kubectl_apply(cluster: KubeCluster, namespace: str, manifest: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`kubectl apply -f -` of a YAML text, as a person would; output captured, not checked."""
    return subprocess.run(
        [
            str(cluster.binaries.kubectl),
            f"--kubeconfig={cluster.kubeconfig}",
            "-n",
            namespace,
            "apply",
            "-f",
            "-",
            *extra,
        ],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="session")
def batchmark_operator(
    batchmark_crd: KubeCluster, operator_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InstalledOperator]:
    """The operator as shipped (installed.py), for the whole session, watching every namespace of the session's
    control plane."""
    operator = InstalledOperator(batchmark_crd, tmp_path_factory.mktemp("operator"))
    operator.install()
    try:
        yield operator
    finally:
        operator.uninstall()


def benchmark(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found = CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", name
    )
    return cast(dict[str, Any], found)


def phase_of(cluster: KubeCluster, namespace: str, name: str) -> str | None:
    phase = (benchmark(cluster, namespace, name).get("status") or {}).get("phase")
    return str(phase) if phase else None


def wait_for_phase(
    cluster: KubeCluster, namespace: str, name: str, phases: set[str], timeout_seconds: float = 120
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = benchmark(cluster, namespace, name)
        return found if (found.get("status") or {}).get("phase") in phases else None

    return wait_for(f"{name} to reach {sorted(phases)}", reached, timeout_seconds)


def example(file_name: str, metrics_linger_seconds: float = 0, **metadata: Any) -> dict[str, Any]:
    """An example manifest from examples/, its metadata changed (e.g. another name).

    No Prometheus scrapes these pods, so by default they stop serving their metrics when their run ends (the
    examples keep the 15 s a scrape needs, which holds each pod, its GPU and its Kueue quota that much longer):
    a test that scrapes a pod's final metrics gives the linger it needs."""
    (document,) = list(yaml.safe_load_all((ROOT / "examples" / file_name).read_text(encoding="utf-8")))
    document["metadata"].update(metadata)
    document["spec"].setdefault("metrics", {})["lingerSeconds"] = metrics_linger_seconds
    return cast(dict[str, Any], document)
