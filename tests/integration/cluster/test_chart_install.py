"""The chart on a real control plane: `helm install` with the chart's default values runs the operator as a
container of the operator image on a real kubelet, an example BatchBenchmark runs to Succeeded with it in the
runner image, `helm test` passes, the Operator and Batch size comparison dashboards return data from a real
Prometheus scraping that operator at its pod's address, `helm upgrade` with other values rolls it, and
`helm uninstall` leaves nothing behind but the CRD and the BatchBenchmarks (its admission policies and their
bindings go with it).

The chart gets a control plane of its own: the session's runs an operator of the operator tests, watching every
namespace, and two operators must never reconcile the same resources.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.build import CHART_DASHBOARDS
from dashboards.promql import queries, substitute
from devtools.cluster.controlplane import ControlPlane
from tests.cluster_fixtures import load_project_image, required_binaries, start_container_cluster
from tests.integration.observability.servers import Prometheus, prometheus

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.images]

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "batchmark"
RELEASE = "batchmark"
NAMESPACE = "batchmark-system"
BENCHMARKS = "benchmarks"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__range": "10m", "datasource": "prometheus"}
OPERATOR_METRICS_PORT = 8080  # the chart's operator.metrics.port


@dataclass
class Installed:
    cluster: ControlPlane
    prometheus: Prometheus

    def kubectl_json(self, *arguments: str) -> Any:
        return json.loads(self.cluster.kubectl(*arguments, "-o", "json").stdout)

    def operator_pods(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.kubectl_json(
            "get", "pods", "-n", NAMESPACE, "-l", f"{INSTANCE},app.kubernetes.io/component=operator"
        )["items"]
        return found


def wait_until(what: str, probe: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.5)


def apply_example(cluster: ControlPlane, tmp_path: Path, name: str, batch_size: int) -> None:
    document = yaml.safe_load((ROOT / "examples" / "simulated-throughput.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["backend"]["batchSize"] = batch_size
    # Prometheus here scrapes the operator's result gauges, not the benchmark pods: they end with their run.
    document["spec"]["metrics"] = {"lingerSeconds": 0}
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(yaml.safe_dump(document))
    cluster.kubectl("apply", "-n", BENCHMARKS, "-f", str(manifest))


def wait_succeeded(installed: Installed, name: str) -> dict[str, Any]:
    def succeeded() -> dict[str, Any] | None:
        found: dict[str, Any] = installed.kubectl_json("get", "bb", name, "-n", BENCHMARKS)
        phase = (found.get("status") or {}).get("phase")
        assert phase not in {"Failed", "Cancelled"}, found["status"]
        return found if phase == "Succeeded" else None

    result: dict[str, Any] = wait_until(f"{name} to succeed", succeeded)
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if required_binaries().helm is None:
        pytest.fail("helm is not built: run scripts/setup/cluster.sh")
    # One GPU node is enough for the three benchmarks, which run one after another.
    cluster = start_container_cluster(tmp_path_factory.mktemp("chart-cluster"), gpu_node_names=("gpu-node-0",))
    try:
        load_project_image(cluster, "operator")
        cluster.kubectl("create", "namespace", BENCHMARKS)
        # The chart's default values: its images are on the nodes under the names it uses.
        installed = cluster.helm(
            "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
            "--wait", "--timeout", "3m",
            check=False,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "kubectl get bb -w" in installed.stdout  # NOTES.txt
        (pod,) = json.loads(
            cluster.kubectl(
                "get", "pods", "-n", NAMESPACE, "-l", f"{INSTANCE},app.kubernetes.io/component=operator", "-o", "json"
            ).stdout
        )["items"]
        # Prometheus scrapes the operator at its pod's address, as the chart's ServiceMonitor's targets are: job
        # named after the metrics Service, the operator's namespace as a target label, its own labels honoured.
        with prometheus(
            tmp_path_factory.mktemp("chart-prometheus"),
            [f"{pod['status']['podIP']}:{OPERATOR_METRICS_PORT}"],
            honor_labels=True,
            target_labels={"namespace": NAMESPACE},
            job=f"{RELEASE}-metrics",
        ) as prom:
            yield Installed(cluster, prom)
    finally:
        cluster.stop()


def test_an_example_runs_to_succeeded_with_the_operator_the_chart_installed(
    installed: Installed, tmp_path: Path
) -> None:
    (pod,) = installed.operator_pods()
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == "cpu-node-0"
    apply_example(installed.cluster, tmp_path, "chart-batch-8", 8)
    apply_example(installed.cluster, tmp_path, "chart-batch-32", 32)
    for name in ("chart-batch-8", "chart-batch-32"):
        found = wait_succeeded(installed, name)
        assert found["status"]["results"], found["status"]
        job = installed.kubectl_json("get", "job", name, "-n", BENCHMARKS)
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "batchmark-runner:0.1.0"  # the chart's benchmarkDefaults


def test_helm_test_finds_the_operator_answering(installed: Installed) -> None:
    # No kube-proxy on this cluster: the metrics Service's name resolves (devtools/cluster/clusterdns.py) to its
    # ClusterIP, which routes nowhere, so the test pod is pointed at the operator pod's own address.
    (pod,) = installed.operator_pods()
    pointed = installed.cluster.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", f"helmTest.operatorHost={pod['status']['podIP']}",
        check=False,
    )  # fmt: skip
    assert pointed.returncode == 0, pointed.stdout + pointed.stderr
    tested = installed.cluster.helm("test", RELEASE, "--namespace", NAMESPACE, "--timeout", "2m", check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Succeeded" in tested.stdout


@pytest.mark.parametrize("file_name", ["operator.json", "batch-size-comparison.json"])
def test_the_operator_dashboards_return_data_from_the_real_operator(installed: Installed, file_name: str) -> None:
    board = json.loads((CHART_DASHBOARDS / file_name).read_text())
    values = {**GRAFANA_VARIABLES, "namespace": BENCHMARKS, "model": "Qwen/Qwen3-0.6B", "job": f"{RELEASE}-metrics"}
    prom = installed.prometheus

    def scraped_results() -> bool:
        return len(prom.query('batchmark_result_output_tokens_per_second{namespace="benchmarks"}')) == 2

    wait_until("Prometheus to scrape both benchmarks' results", scraped_results, timeout=30)
    checked = 0
    for where, expr in queries(board):
        promql = substitute(expr, values)
        assert prom.query(promql), f"{where} returned nothing: {promql}"
        checked += 1
    assert checked >= 4
    if file_name == "batch-size-comparison.json":
        by_size = prom.query(
            substitute(
                'max by (model, batch_size) (batchmark_result_output_tokens_per_second{namespace=~"$namespace"})',
                values,
            )
        )
        assert sorted(series["metric"]["batch_size"] for series in by_size) == ["32", "8"]


# A UID from the range OpenShift gives a namespace: no user of the image has it.
ARBITRARY_UID = 1000770000


def test_helm_upgrade_with_other_values_rolls_the_operator(installed: Installed, tmp_path: Path) -> None:
    (before,) = installed.operator_pods()
    # The runner image on the nodes, by its digest: what a person pins to run the very image that was tested.
    runner_digest = runner_image_digest(installed.cluster)
    # And the operator as OpenShift's restricted policy runs images: an arbitrary UID with GID 0, no passwd entry.
    upgraded = installed.cluster.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", "benchmarkDefaults.image.tag=upgraded", "--set", f"benchmarkDefaults.image.digest={runner_digest}",
        "--set", f"operator.securityContext.runAsUser={ARBITRARY_UID}",
        "--set", "operator.securityContext.runAsGroup=0", "--set", "operator.securityContext.fsGroup=0",
        "--wait", "--timeout", "3m",
        check=False,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr

    def rolled() -> dict[str, Any] | None:
        pods = installed.operator_pods()
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if len(pods) == 1 and running and running[0]["metadata"]["uid"] != before["metadata"]["uid"]:
            return running[0]
        return None

    after = wait_until("the operator's new pod", rolled)
    identity = after["spec"]["securityContext"]
    assert (identity["runAsUser"], identity["runAsGroup"], identity["fsGroup"]) == (ARBITRARY_UID, 0, 0)
    assert (
        after["metadata"]["annotations"]["checksum/defaults"] != before["metadata"]["annotations"]["checksum/defaults"]
    )
    # The new operator, under that UID, reconciles, and reads the new defaults: a benchmark applied now runs the
    # runner image pinned by digest (which wins over the tag).
    apply_example(installed.cluster, tmp_path, "chart-after-upgrade", 16)
    wait_succeeded(installed, "chart-after-upgrade")
    job = installed.kubectl_json("get", "job", "chart-after-upgrade", "-n", BENCHMARKS)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"batchmark-runner@{runner_digest}"


def runner_image_digest(cluster: ControlPlane) -> str:
    """The digest under which the GPU node holds the chart's default runner image, as its kubelet reports it."""
    node = json.loads(cluster.kubectl("get", "node", "gpu-node-0", "-o", "json").stdout)
    for image in node["status"].get("images", []):
        for name in image["names"]:
            if name.startswith("docker.io/library/batchmark-runner@sha256:"):
                return str(name.rsplit("@", 1)[1])
    raise AssertionError(f"gpu-node-0 does not report the runner image by digest: {node['status'].get('images')}")


def test_helm_uninstall_leaves_only_the_crd_and_the_benchmarks(installed: Installed) -> None:
    cluster = installed.cluster
    # The admission policies the benchmarks above ran under, and their bindings, are the release's too.
    admission = "validatingadmissionpolicies,validatingadmissionpolicybindings"
    policies = cluster.kubectl("get", admission, "-l", INSTANCE, "-o", "name").stdout.split()
    assert sorted(policies) == sorted(
        f"{kind}.admissionregistration.k8s.io/{RELEASE}-{name}-writes"
        for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding")
        for name in ("operator", "runner")
    )
    uninstalled = cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False)
    assert uninstalled.returncode == 0, uninstalled.stdout + uninstalled.stderr
    assert "kept due to the resource policy" in uninstalled.stdout + uninstalled.stderr

    def nothing_left() -> bool:
        namespaced = cluster.kubectl(
            "get", "all,configmaps,serviceaccounts,roles,rolebindings,networkpolicies",
            "-n", NAMESPACE, "-l", INSTANCE, "-o", "name",
        ).stdout.split()  # fmt: skip
        cluster_wide = cluster.kubectl(
            "get", f"clusterroles,clusterrolebindings,{admission}", "-l", INSTANCE, "-o", "name"
        )
        pods = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name").stdout.split()
        return not namespaced and not cluster_wide.stdout.split() and not pods

    wait_until("the release's objects to go", nothing_left, timeout=60)
    crd = installed.kubectl_json("get", "crd", "batchbenchmarks.batchmark.dev")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    names = {item["metadata"]["name"] for item in installed.kubectl_json("get", "bb", "-n", BENCHMARKS)["items"]}
    assert names == {"chart-batch-8", "chart-batch-32", "chart-after-upgrade"}
