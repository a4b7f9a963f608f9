"""The operator needs no more than the rules of batchmark.operator.rbac (the chart's ClusterRole is written from
them): run it as a ServiceAccount bound to exactly those, and a benchmark still goes all the way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.operator.conftest import (
    OperatorProcess,
    example,
    kubectl_apply,
    operator_with_only_its_rbac,
    wait_for_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_the_operator_runs_with_exactly_its_documented_rbac(
    batchmark_operator: OperatorProcess, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    with operator_with_only_its_rbac(batchmark_operator, kube_namespace, tmp_path) as restricted:
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
