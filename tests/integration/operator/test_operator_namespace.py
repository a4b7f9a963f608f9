"""`batchmark operator --namespace NS` (the chart's operator.watchNamespaces) serves the BatchBenchmarks of NS and
leaves every other namespace's alone: no status, no finalizer, no Job (another team's operator may own those)."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml
from kubernetes.client import BatchV1Api

from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_a_namespaced_operator_ignores_another_namespaces_benchmark(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    other = f"test-other-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", other)
    # The session's operator, upgraded to watch this namespace alone (a Role in it, no ClusterRole for
    # BatchBenchmarks); it watches every namespace again afterwards.
    with batchmark_operator.reconfigured({"operator": {"watchNamespaces": [kube_namespace]}}) as watching:
        try:
            manifest = example("simulated-throughput.yaml", name="watched")
            manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 20}]
            ignored = example("simulated-throughput.yaml", name="ignored")
            ignored["spec"]["constraints"] = [{"kind": "max_requests", "count": 20}]
            assert kubectl_apply(cluster, other, yaml.safe_dump(ignored)).returncode == 0
            assert kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest)).returncode == 0
            found = wait_for_phase(cluster, kube_namespace, "watched", {"Succeeded", "Failed"}, 180)
            assert found["status"]["phase"] == "Succeeded", found["status"]
            time.sleep(2)  # the ignored one was applied first: any handling of it would have shown by now
            untouched = benchmark(cluster, other, "ignored")
            assert "status" not in untouched, untouched.get("status")
            assert not untouched["metadata"].get("finalizers")
            annotations = untouched["metadata"].get("annotations") or {}
            assert not [key for key in annotations if key.startswith("batchmark.dev/")]
            assert BatchV1Api(cluster.api_client()).list_namespaced_job(other).items == []
            watching.assert_alive()
            # The chart lets it list and watch namespaces: refused, kopf retried for ~35 s before it served.
            assert "Not enough permissions" not in watching.log()
        finally:
            # Gone before the operator watches every namespace again: it would take up the ignored benchmark (in
            # a namespace being deleted: the next test would read its refusals in the log). Untouched, it has no
            # finalizer, so it goes at once; the namespace's own deletion takes the namespace controller a minute.
            cluster.kubectl("delete", "bb", "ignored", "-n", other, "--timeout=60s", check=False)
            cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
