"""The operator needs no more than the rules of batchmark.operator.controller.rbac (the chart's ClusterRole is
written from them): as the chart installs it, bound to exactly those, a benchmark goes all the way.

The operator watches every namespace, so its log also holds refusals that are no one's privileges
(tests/integration/operator/refusals.py tells them apart).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from batchmark.operator.controller.kube import api_client
from tests.integration.operator.conftest import (
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.refusals import (
    assert_never_refused,
    refusals,
    refused_by_rbac,
    refused_for_a_terminating_namespace,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_the_operator_runs_with_exactly_its_documented_rbac(
    batchmark_operator: InstalledOperator, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    # The session's operator runs as the chart's ServiceAccount, whose ClusterRole is OPERATOR_RULES (the chart's
    # tests hold the two equal).
    restricted = batchmark_operator
    mark = restricted.log_mark()
    manifest = example("simulated-throughput.yaml", name="least-privilege")
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 30}]
    assert kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest)).returncode == 0
    found = wait_for_phase(cluster, kube_namespace, "least-privilege", {"Succeeded", "Failed"}, 180)
    assert found["status"]["phase"] == "Succeeded", found["status"]
    assert found["status"]["results"]
    restricted.assert_alive()
    assert_never_refused(restricted.log_since(mark))

    # The classifier on the API server's own refusal, as the operator would log it: the same account may
    # not read Secrets, and that answer is RBAC's.
    kubeconfig = restricted.account_kubeconfig(tmp_path / "operator.kubeconfig")
    with pytest.raises(ApiException) as answer:
        CoreV1Api(api_client(str(kubeconfig))).list_namespaced_secret(kube_namespace)
    assert answer.value.status == 403
    (told,) = refusals(f"2026-01-01 00:00:00,000 ERROR kopf.objects: API server: {answer.value}")
    assert refused_by_rbac(told), told
    assert not refused_for_a_terminating_namespace(told), told


def test_a_terminating_namespace_is_told_apart_from_a_refusal_by_rbac() -> None:
    """On the API server's answers as the operator logged them (bodies copied from such a log; the admission
    policy's as the API server words it)."""
    terminating = (
        "2026-12-04 21:58:59,970 ERROR kopf.objects: Handler 'created' failed temporarily: API server: (403)\n"
        "Reason: Forbidden\n"
        'HTTP response body: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"configmaps \\"same-config\\" is forbidden: unable to create new content in namespace test-9110b55ae4 '
        'because it is being terminated","reason":"Forbidden","details":{"name":"same-config","kind":"configmaps",'
        '"causes":[{"reason":"NamespaceTerminating","message":"namespace test-9110b55ae4 is being terminated",'
        '"field":"metadata.namespace"}]},"code":403}\n\n'
    )
    rbac = (
        "2026-12-04 21:59:00,125 ERROR kopf.objects: Handler 'created' failed temporarily: API server: (403)\n"
        "Reason: Forbidden\n"
        'HTTP response body: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"jobs.batch is forbidden: User \\"system:serviceaccount:test-1:batchmark-operator\\" cannot create '
        'resource \\"jobs\\" in API group \\"batch\\" in the namespace \\"test-1\\"","reason":"Forbidden",'
        '"details":{"group":"batch","kind":"jobs"},"code":403}\n'
    )
    denied = (
        "2026-12-06 05:20:00,125 ERROR kopf.objects: Handler 'created' failed temporarily: API server: (422)\n"
        "Reason: Unprocessable Entity\n"
        'HTTP response body: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"jobs.batch \\"forged\\" is invalid: : ValidatingAdmissionPolicy \'t-batchmark-operator-writes\' with '
        "binding 't-batchmark-operator-writes' denied request: a Job the operator creates mounts no hostPath\","
        '"reason":"Invalid","code":422}\n'
    )
    quiet = "2026-12-04 21:59:01,403 INFO kopf.objects: Handler 'created' succeeded.\n"
    refused = refusals(quiet + terminating + quiet + rbac + quiet + denied)
    assert refused == [terminating, rbac, denied]
    with pytest.raises(AssertionError, match="denied request"):
        assert_never_refused(denied)
    assert refused_for_a_terminating_namespace(terminating)
    assert not refused_by_rbac(terminating)
    assert refused_by_rbac(rbac)
    assert not refused_for_a_terminating_namespace(rbac)
