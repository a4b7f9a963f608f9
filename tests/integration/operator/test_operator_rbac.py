"""The operator needs no more than the rules of batchmark.operator.rbac (the chart's ClusterRole is written from
them): run it as a ServiceAccount bound to exactly those, and a benchmark still goes all the way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from batchmark.operator.rbac import OPERATOR_RULES
from tests.cluster.controlplane import write_kubeconfig
from tests.integration.operator.conftest import OperatorProcess, example, kubectl_apply, wait_for_phase

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_the_operator_runs_with_exactly_its_documented_rbac(
    batchmark_operator: OperatorProcess, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    account = "batchmark-operator"
    role = f"batchmark-operator-{kube_namespace}"
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": kube_namespace}},
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
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": kube_namespace}],
        },
    ]
    applied = kubectl_apply(cluster, kube_namespace, yaml.safe_dump_all(manifests))
    assert applied.returncode == 0, applied.stderr
    token = cluster.kubectl("create", "token", account, "-n", kube_namespace, "--duration=1h").stdout.strip()
    kubeconfig = tmp_path / "operator.kubeconfig"
    write_kubeconfig(kubeconfig, cluster.server, cluster.pki.ca.certificate, account, token=token)
    # The session's operator (admin) steps aside while this one works; it comes back for the other tests.
    batchmark_operator.stop()
    restricted = OperatorProcess(cluster, tmp_path / "operator.log", kubeconfig=kubeconfig)
    try:
        restricted.start()
        manifest = example("simulated-throughput.yaml", name="least-privilege")
        manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 30}]
        assert kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest)).returncode == 0
        found = wait_for_phase(cluster, kube_namespace, "least-privilege", {"Succeeded", "Failed"}, 180)
        assert found["status"]["phase"] == "Succeeded", found["status"]
        assert found["status"]["results"]
        restricted.assert_alive()
        log = restricted.log_path.read_text(errors="replace")
        assert "Forbidden" not in log
        assert " 403" not in log
    finally:
        restricted.stop()
        batchmark_operator.start()
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", role, check=False)
