"""The benchmark pods' user as the installer sets it (the operator's defaults, `securityContext`): the operator's
own Job on real kubelets over containerd (devtools/cluster, runtime="containers"), in the runner image, under an
arbitrary UID with GID 0, as OpenShift's restricted policy runs pods."""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from devtools.cluster import images
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import (
    apply_watched_benchmark,
    assert_succeeds_with_results,
    assert_writes_home_and_caches,
    running_pod,
)
from tests.integration.cluster.containers import container_process, ids
from tests.integration.operator.conftest import kubectl_apply
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

# Neither the image's user (10001) nor in its /etc/passwd: nothing of the image can be owned by it.
ARBITRARY_UID = 1234567
# The first UID of a namespace's range, as OpenShift assigns them (openshift.io/sa.scc.uid-range).
RANGE_START = 1000640000


@pytest.fixture
def platform_ids_operator(batchmark_operator: InstalledOperator) -> Iterator[InstalledOperator]:
    """The operator upgraded with OpenShift's values (the chart's README): every ID of benchmark pods null."""
    ids = {"runAsUser": None, "runAsGroup": None, "fsGroup": None}
    with batchmark_operator.reconfigured({"benchmarkDefaults": {"securityContext": ids}}) as operator:
        yield operator


@pytest.fixture
def namespace_uid_range(container_cluster: KubeCluster, container_namespace: str) -> Iterator[int]:
    """What OpenShift's restricted-v2 SecurityContextConstraints do at admission, as a MutatingAdmissionPolicy of
    the API server's: a pod of the namespace that sets no runAsUser gets the first UID of the namespace's range
    (yielded), and that as its fsGroup; no runAsGroup, so the container's group is 0."""
    cluster, namespace = container_cluster, container_namespace
    name = f"uid-range-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "matchConditions": [
                {
                    "name": "no-user",
                    "expression": "!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsUser)",
                }
            ],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": (
                            "Object{spec: Object.spec{securityContext: Object.spec.securityContext{"
                            f"runAsUser: {RANGE_START}, fsGroup: {RANGE_START}}}}}}}"
                        )
                    },
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump_all([policy, binding]))
    assert applied.returncode == 0, applied.stderr
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "probe", "image": images.TAGS["runner"]}]},
    }

    def assigned() -> bool:
        # A dry run goes through admission and stores nothing.
        created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", probe)
        return bool(created["spec"].get("securityContext", {}).get("runAsUser") == RANGE_START)

    try:
        wait_for("the policy in force", assigned, 60, period_seconds=1)
        yield RANGE_START
    finally:
        cluster.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", name, check=False)


@pytest.fixture
def arbitrary_uid_operator(batchmark_operator: InstalledOperator) -> Iterator[InstalledOperator]:
    """The operator upgraded with `benchmarkDefaults.securityContext` of an arbitrary UID, GID 0 and no fsGroup
    (values: runAsUser 1234567, runAsGroup 0, fsGroup null)."""
    ids = {"runAsUser": ARBITRARY_UID, "runAsGroup": 0, "fsGroup": None}
    with batchmark_operator.reconfigured({"benchmarkDefaults": {"securityContext": ids}}) as operator:
        yield operator


def test_the_operators_job_runs_under_an_arbitrary_uid_with_gid_0_and_writes_home_and_caches(
    arbitrary_uid_operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace, name = arbitrary_uid_operator.cluster, container_namespace, "arbitrary-uid"
    apply_watched_benchmark(cluster, namespace, name)
    pod = running_pod(cluster, namespace, name)

    # The operator wrote the IDs it was given, and left fsGroup out for the platform.
    security = pod.spec.security_context
    assert (security.run_as_user, security.run_as_group, security.fs_group) == (ARBITRARY_UID, 0, None)
    assert security.run_as_non_root is True
    assert pod.spec.containers[0].image == images.chart_image("runner")

    # `batchmark run` runs in the container as that user, with group 0.
    pid = wait_for("the runner's process", lambda: container_process(pod.metadata.uid, "run", "--config"), 60)
    assert ids(pid) == ([ARBITRARY_UID] * 4, [0] * 4)

    # That user writes its home, working directory and every cache vLLM and Hugging Face use: the image made
    # them group 0's, since nothing of it can be owned by a UID chosen at run time.
    assert_writes_home_and_caches(cluster, namespace, pod)
    assert_succeeds_with_results(cluster, namespace, name)


def job_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        job: dict[str, Any] = cluster.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    return job


def test_with_the_ids_left_to_the_platform_the_runner_runs_as_the_uid_admission_assigns(
    platform_ids_operator: InstalledOperator, namespace_uid_range: int, container_namespace: str
) -> None:
    cluster, namespace, name = platform_ids_operator.cluster, container_namespace, "platform-uid"
    apply_watched_benchmark(cluster, namespace, name)
    job = wait_for("the Job", lambda: job_of(cluster, namespace, name), 60)
    # The operator fixes no ID in the pod template ...
    template_security = job["spec"]["template"]["spec"]["securityContext"]
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & template_security.keys(), template_security
    assert template_security["runAsNonRoot"] is True
    pod = running_pod(cluster, namespace, name)
    # ... so admission gave the pod the namespace's, and the container runs as that UID with group 0.
    security = pod.spec.security_context
    assert (security.run_as_user, security.run_as_group, security.fs_group) == (namespace_uid_range, None, RANGE_START)
    pid = wait_for("the runner's process", lambda: container_process(pod.metadata.uid, "run", "--config"), 60)
    assert ids(pid) == ([namespace_uid_range] * 4, [0] * 4)
    assert_writes_home_and_caches(cluster, namespace, pod)
    assert_succeeds_with_results(cluster, namespace, name)
