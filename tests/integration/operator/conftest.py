"""Fixtures of the operator's tests: the CRD applied once to the session's control plane."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from batchmark.operator.controller.rbac import OPERATOR_RULES
from devtools.cluster.controlplane import free_port, write_kubeconfig
from tests.cli import command
from tests.cluster_fixtures import KubeCluster
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


@dataclass
class OperatorProcess:
    """`batchmark operator` as a real process (as the chart runs it), watching all namespaces or those given."""

    cluster: KubeCluster
    log_path: Path
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    kubeconfig: Path | None = None  # default: the cluster's admin
    namespaces: tuple[str, ...] = ()  # --namespace, each; none: all namespaces
    defaults: Path | None = None  # --defaults FILE, as the chart renders it

    def start(self) -> None:
        argv = command("operator", "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port))
        argv += ["--health-address", "127.0.0.1", "--health-port", str(self.health_port)]
        if self.defaults is not None:
            argv += ["--defaults", str(self.defaults)]
        for namespace in self.namespaces:
            argv += ["--namespace", namespace]
        environment = {**os.environ, "KUBECONFIG": str(self.kubeconfig or self.cluster.kubeconfig)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=environment)
        wait_for("the operator's /healthz", self.healthy, timeout_seconds=60)

    def healthy(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"the operator exited:\n{self.log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as when a node dies."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def assert_alive(self) -> None:
        assert self.process is not None
        assert self.process.poll() is None, self.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="session")
def batchmark_operator(
    batchmark_crd: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator, running for the whole session against the session's control plane."""
    operator = OperatorProcess(batchmark_crd, tmp_path_factory.mktemp("operator") / "operator.log")
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


def benchmark(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found = CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", name
    )
    return cast(dict[str, Any], found)


def phase_of(cluster: KubeCluster, namespace: str, name: str) -> str | None:
    phase = (benchmark(cluster, namespace, name).get("status") or {}).get("phase")
    return str(phase) if phase else None


@contextmanager
def operator_with_only_its_rbac(
    session_operator: OperatorProcess, namespace: str, directory: Path
) -> Iterator[OperatorProcess]:
    """An operator running as a ServiceAccount bound to exactly the rules of batchmark.operator.controller.rbac
    (the chart's ClusterRole is written from them), in place of the session's admin one, which comes back
    afterwards."""
    cluster = session_operator.cluster
    account, role = "batchmark-operator", f"batchmark-operator-{namespace}"
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": OPERATOR_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    ]
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump_all(manifests))
    assert applied.returncode == 0, applied.stderr
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    kubeconfig = directory / "operator.kubeconfig"
    write_kubeconfig(kubeconfig, cluster.server, cluster.pki.ca.certificate, account, token=token)
    session_operator.stop()
    restricted = OperatorProcess(cluster, directory / "operator.log", kubeconfig=kubeconfig)
    try:
        restricted.start()
        yield restricted
    finally:
        restricted.stop()
        session_operator.start()
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", role, check=False)


@contextmanager
def operator_with_defaults(
    cluster: KubeCluster, namespace: str, directory: Path, defaults: dict[str, Any], session_operator: OperatorProcess
) -> Iterator[OperatorProcess]:
    """An operator watching only ``namespace`` of ``cluster`` with ``defaults`` as its --defaults file. Where the
    session's operator (all namespaces) runs on the same cluster, it would create the benchmarks' Jobs too: it
    is stopped meanwhile and started again afterwards."""
    with_the_crd(cluster)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "defaults.yaml"
    path.write_text(yaml.safe_dump(defaults), encoding="utf-8")
    sharing = session_operator.cluster is cluster
    if sharing:
        session_operator.stop()
    operator = OperatorProcess(cluster, directory / "operator.log", namespaces=(namespace,), defaults=path)
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        if sharing:
            session_operator.start()


@dataclass
class ChartRbac:
    """The chart's RBAC and admission policies (templates/rbac.yaml, admission.yaml and serviceaccount.yaml) as
    helm renders and kubectl applies them."""

    namespace: str  # the release's, the operator's ServiceAccount's
    service_account: str
    policy_prefix: str  # "<release>-batchmark": the policies are <prefix>-operator-writes and <prefix>-runner-writes
    cluster_scoped: list[tuple[str, str]]  # (kind, name) of what to delete afterwards

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def install_the_charts_rbac(cluster: KubeCluster, release: str, namespace: str, *sets: str) -> ChartRbac:
    """Render the chart's RBAC (with its ValidatingAdmissionPolicies) for a release named ``release`` (its
    cluster-wide names are then the test's own) in ``namespace``, and apply it, as `helm install` would."""
    arguments = ["template", release, str(ROOT / "charts" / "batchmark"), "--namespace", namespace]
    for template in ("rbac.yaml", "admission.yaml", "serviceaccount.yaml"):
        arguments += ["--show-only", f"templates/{template}"]
    for assignment in sets:
        arguments += ["--set", assignment]
    rendered = cluster.helm(*arguments).stdout
    documents = [document for document in yaml.safe_load_all(rendered) if document]
    applied = kubectl_apply(cluster, namespace, rendered)
    assert applied.returncode == 0, applied.stderr
    (account,) = [document for document in documents if document["kind"] == "ServiceAccount"]
    cluster_scoped = [
        (document["kind"], document["metadata"]["name"])
        for document in documents
        if document["kind"]
        in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]
    (policy,) = [name for kind, name in cluster_scoped if kind == "ValidatingAdmissionPolicy" and "-operator-" in name]
    return ChartRbac(namespace, account["metadata"]["name"], policy.removesuffix("-operator-writes"), cluster_scoped)


@contextmanager
def operator_with_the_charts_rbac(
    session_operator: OperatorProcess, namespace: str, directory: Path
) -> Iterator[tuple[OperatorProcess, ChartRbac]]:
    """An operator running as the chart's ServiceAccount with the chart's RBAC and admission policies, in place of
    the session's admin one, which comes back afterwards. The chart is installed in a namespace of its own
    (``<namespace>-operator``, deleted afterwards), as the operator's namespace is one it may create nothing in;
    the benchmarks go into ``namespace``."""
    cluster = session_operator.cluster
    operators = f"{namespace}-operator"
    namespace_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operators}}
    cluster.request("POST", "/api/v1/namespaces", namespace_object)
    rbac = install_the_charts_rbac(cluster, namespace, operators)
    token = cluster.kubectl("create", "token", rbac.service_account, "-n", operators, "--duration=1h").stdout.strip()
    kubeconfig = directory / "operator.kubeconfig"
    write_kubeconfig(kubeconfig, cluster.server, cluster.pki.ca.certificate, rbac.service_account, token=token)
    session_operator.stop()
    restricted = OperatorProcess(cluster, directory / "operator.log", kubeconfig=kubeconfig)
    try:
        restricted.start()
        yield restricted, rbac
    finally:
        restricted.stop()
        session_operator.start()
        for kind, name in rbac.cluster_scoped:
            cluster.kubectl("delete", kind.lower(), name, check=False)
        cluster.request("DELETE", f"/api/v1/namespaces/{operators}")


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
