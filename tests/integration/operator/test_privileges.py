"""What the operator and a benchmark's runner may do, asked of the real API server with the chart's RBAC and
admission policies as installed (helm template of templates/rbac.yaml and admission.yaml, applied) and the
runner's Role as the operator makes it.

The table below is the promise; charts/batchmark/README.md ("Privileges") shows it, and a test here checks the
README says exactly this table, and the forged writes of forged_writes.py. Each row is asked with
`kubectl auth can-i --as=system:serviceaccount:...` (a SubjectAccessReview); the Roles the operator could try
to create are sent, as it, to the API server (`--dry-run=server`: the RBAC escalation check and the chart's
ValidatingAdmissionPolicies run, nothing is stored), and so are the forged writes, with the operator's and the
runner's own tokens.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster.controlplane import write_kubeconfig
from devtools.cluster.jobset import JobSet
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator import forged_writes
from tests.integration.operator.conftest import (
    ROOT,
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.forged_writes import HERE, OPERATORS, SYSTEM, Scene
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.refusals import assert_never_refused

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

CHART_README = ROOT / "charts" / "batchmark" / "README.md"
# Where each row is asked: the benchmarks' namespace, one with nothing of batchmark's, and kube-system.
ELSEWHERE, EVERYWHERE = "another namespace", "all namespaces"


@dataclass(frozen=True)
class Check:
    who: str  # "operator" (the chart's ServiceAccount) or "runner" (benchmark `mine`'s)
    verb: str
    resource: str  # as kubectl names it; `mine` and `other` are two benchmarks of the namespace
    where: str
    allowed: bool
    why: str
    subresource: str = ""

    @property
    def action(self) -> str:
        return f"{self.verb} {self.resource}" + (f" (subresource {self.subresource})" if self.subresource else "")


BB = "batchbenchmarks.batchmark.dev"
TABLE = [
    # The operator: its own resource, and create-only on the children it makes.
    Check("operator", "watch", BB, EVERYWHERE, True, "follow the benchmarks"),
    Check("operator", "patch", f"{BB}/mine", HERE, True, "the status fields it writes", "status"),
    Check("operator", "update", f"{BB}/mine", HERE, True, "owner references that block deletion", "finalizers"),
    Check("operator", "create", "configmaps", HERE, True, "a benchmark's runner config"),
    Check("operator", "create", "serviceaccounts", HERE, True, "a benchmark's runner identity"),
    Check("operator", "create", "roles", HERE, True, "the runner's Role (no more than it holds itself)"),
    Check("operator", "create", "rolebindings", HERE, True, "the runner's RoleBinding"),
    Check("operator", "create", "jobs.batch", HERE, True, "the benchmark's Job (admission: as it makes them)"),
    Check("operator", "create", "jobsets.jobset.x-k8s.io", HERE, True, "a JobSet, over several pods (admission: idem)"),
    Check("operator", "delete", "jobsets.jobset.x-k8s.io", HERE, False, "deletes nothing (the garbage collector does)"),
    Check("operator", "watch", "pods", EVERYWHERE, True, "the Jobs' pods (RBAC cannot narrow a watch to labels)"),
    Check("operator", "get", "configmaps/mine-config", HERE, False, "reads no ConfigMap, not even its own"),
    Check("operator", "list", "configmaps", EVERYWHERE, False, "reads no ConfigMap"),
    Check("operator", "patch", "configmaps/somebody-elses", ELSEWHERE, False, "changes no ConfigMap"),
    Check("operator", "get", "configmaps/aws-auth", SYSTEM, False, "kube-system's ConfigMaps"),
    Check("operator", "patch", "configmaps/aws-auth", SYSTEM, False, "kube-system's ConfigMaps"),
    Check("operator", "delete", "configmaps", HERE, False, "deletes nothing (the garbage collector does)"),
    Check("operator", "get", "secrets", HERE, False, "no Secrets"),
    Check("operator", "list", "secrets", EVERYWHERE, False, "no Secrets"),
    Check("operator", "get", "roles", HERE, False, "reads no Role"),
    Check("operator", "patch", "roles/somebody-elses", HERE, False, "changes no Role"),
    Check("operator", "escalate", "roles", HERE, False, "cannot grant what it does not hold"),
    Check("operator", "bind", "roles", HERE, False, "cannot bind what it does not hold"),
    Check("operator", "bind", "clusterroles/admin", HERE, False, "cannot bind what it does not hold"),
    Check("operator", "create", "clusterrolebindings", EVERYWHERE, False, "nothing cluster-wide"),
    Check("operator", "patch", "serviceaccounts/default", HERE, False, "changes no ServiceAccount"),
    Check("operator", "create", "serviceaccounts/default", HERE, False, "no tokens", "token"),
    Check("operator", "create", "pods", HERE, False, "runs nothing but Jobs"),
    Check("operator", "create", "pods/mine", HERE, False, "no exec into pods", "exec"),
    Check("operator", "impersonate", "serviceaccounts", HERE, False, "acts as no one else"),
    # The runner of benchmark `mine`: its one status, and creating the ConfigMap of its report.
    Check("runner", "get", f"{BB}/mine", HERE, True, "its own status", "status"),
    Check("runner", "patch", f"{BB}/mine", HERE, True, "its progress and results", "status"),
    Check("runner", "create", "configmaps", HERE, True, "the ConfigMap of its full report (admission: that one only)"),
    Check("runner", "patch", f"{BB}/other", HERE, False, "another benchmark's status", "status"),
    Check("runner", "get", f"{BB}/other", HERE, False, "another benchmark's status", "status"),
    Check("runner", "patch", f"{BB}/mine", HERE, False, "its spec"),
    Check("runner", "delete", f"{BB}/mine", HERE, False, "its benchmark"),
    Check("runner", "get", "configmaps/mine-config", HERE, False, "reads no ConfigMap"),
    Check("runner", "patch", "configmaps/other-results", HERE, False, "changes no ConfigMap"),
    Check("runner", "list", "configmaps", HERE, False, "reads no ConfigMap"),
    Check("runner", "get", "configmaps/aws-auth", SYSTEM, False, "kube-system's ConfigMaps"),
    Check("runner", "create", "configmaps", ELSEWHERE, False, "only in its namespace"),
    Check("runner", "get", "secrets", HERE, False, "no Secrets"),
    Check("runner", "list", "pods", HERE, False, "no pods"),
    Check("runner", "create", "pods", HERE, False, "no pods"),
    Check("runner", "create", "roles", HERE, False, "grants nothing"),
    Check("runner", "create", "rolebindings", HERE, False, "grants nothing"),
]


def markdown_table() -> str:
    """The table as charts/batchmark/README.md shows it."""
    lines = ["| Who | Action | Where | Allowed | Why |", "|---|---|---|---|---|"]
    for check in TABLE:
        allowed = "yes" if check.allowed else "**no**"
        lines.append(f"| {check.who} | `{check.action}` | {check.where} | {allowed} | {check.why} |")
    return "\n".join(lines) + "\n"


def test_the_charts_readme_shows_the_tables() -> None:
    readme = CHART_README.read_text(encoding="utf-8")
    assert markdown_table() in readme, (
        "charts/batchmark/README.md must show the privilege table of tests/integration/operator/test_privileges.py"
    )
    assert forged_writes.markdown_table() in readme, (
        "charts/batchmark/README.md must show the forged writes of tests/integration/operator/forged_writes.py"
    )


def can_i(cluster: KubeCluster, user: str, check: Check, namespaces: dict[str, str]) -> bool:
    arguments = ["auth", "can-i", check.verb, check.resource, f"--as={user}"]
    if check.subresource:
        arguments.append(f"--subresource={check.subresource}")
    arguments += ["--all-namespaces"] if check.where == EVERYWHERE else ["-n", namespaces[check.where]]
    answer = cluster.kubectl(*arguments, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


def create_as(
    cluster: KubeCluster, user: str, namespace: str, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`kubectl create --dry-run=server` as the user: the API server authorises and checks it, stores nothing."""
    return subprocess.run(
        [
            str(cluster.binaries.kubectl),
            f"--kubeconfig={cluster.kubeconfig}",
            "-n",
            namespace,
            "create",
            "-f",
            "-",
            "--dry-run=server",
            f"--as={user}",
        ],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def was_refused(result: subprocess.CompletedProcess[str]) -> bool:
    """Refused by RBAC (403, its escalation check included) or by the chart's operator-writes policy."""
    said = result.stderr.lower()
    return result.returncode != 0 and ("forbidden" in said or "-operator-writes' denied request" in said)


def role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def short_run(name: str) -> dict[str, Any]:
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 30}]
    return manifest


def test_the_operator_and_the_runner_hold_exactly_the_table(
    batchmark_operator: InstalledOperator, jobset: JobSet, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    # The session's operator: the chart's ServiceAccount, RBAC and admission policies, as installed.
    restricted, rbac = batchmark_operator, batchmark_operator.rbac()
    mark = restricted.log_mark()
    for name in ("mine", "other"):
        applied = kubectl_apply(cluster, kube_namespace, yaml.safe_dump(short_run(name)))
        assert applied.returncode == 0, applied.stderr
    for name in ("mine", "other"):
        found = wait_for_phase(cluster, kube_namespace, name, {"Succeeded", "Failed"}, 180)
        assert found["status"]["phase"] == "Succeeded", found["status"]
    restricted.assert_alive()
    assert_never_refused(restricted.log_since(mark))

    # A benchmark in the operator's own namespace, where the policy lets it create nothing: it ends Failed with
    # the policy's answer at once, instead of being retried for ever.
    applied = kubectl_apply(cluster, rbac.namespace, yaml.safe_dump(short_run("protected")))
    assert applied.returncode == 0, applied.stderr
    try:
        refused = wait_for_phase(cluster, rbac.namespace, "protected", {"Succeeded", "Failed"}, 60)["status"]
    finally:
        cluster.kubectl("delete", "bb", "protected", "-n", rbac.namespace, "--wait=false", check=False)
    assert (refused["phase"], refused["reason"]) == ("Failed", "AdmissionRefused"), refused
    assert f"{rbac.policy_prefix}-operator-writes" in refused["message"], refused["message"]

    job = cluster.kubectl("get", "job", "mine", "-n", kube_namespace, "-o", "yaml").stdout
    runner_account = yaml.safe_load(job)["spec"]["template"]["spec"]["serviceAccountName"]
    users = {"operator": rbac.user, "runner": f"system:serviceaccount:{kube_namespace}:{runner_account}"}
    namespaces = {HERE: kube_namespace, ELSEWHERE: "default", SYSTEM: "kube-system"}
    wrong = [
        f"{check.who} {check.action} in {check.where}: {'refused' if check.allowed else 'allowed'}"
        for check in TABLE
        if can_i(cluster, users[check.who], check, namespaces) != check.allowed
    ]
    assert not wrong, wrong

    scene = Scene(
        namespaces={HERE: kube_namespace, OPERATORS: rbac.namespace, SYSTEM: "kube-system"},
        mine_uid=benchmark(cluster, kube_namespace, "mine")["metadata"]["uid"],
        other_uid=benchmark(cluster, kube_namespace, "other")["metadata"]["uid"],
        mine_pod=runner_pod(cluster, kube_namespace, "mine")["metadata"]["name"],
        other_pod=runner_pod(cluster, kube_namespace, "other")["metadata"]["name"],
    )
    the_roles_and_bindings_it_may_create_are_the_runners(cluster, users["operator"], scene)

    # The forged writes, each sent with the token of its sender: the operator's as it runs, the runner's
    # bound to its pod as Kubernetes mounts it there.
    operator_kubeconfig = restricted.account_kubeconfig(tmp_path / "operator.kubeconfig")
    kubeconfigs = {"operator": operator_kubeconfig, "runner": tmp_path / "runner.kubeconfig"}
    pod = runner_pod(cluster, kube_namespace, "mine")["metadata"]
    token = cluster.kubectl(
        "create", "token", runner_account, "-n", kube_namespace, "--duration=10m",
        "--bound-object-kind=Pod", f"--bound-object-name={pod['name']}", f"--bound-object-uid={pod['uid']}",
    ).stdout.strip()  # fmt: skip
    write_kubeconfig(kubeconfigs["runner"], cluster.server, cluster.pki.ca.certificate, runner_account, token=token)
    wrong = forged_writes.wrong_answers(cluster.binaries.kubectl, kubeconfigs, scene, rbac.policy_prefix)
    assert not wrong, "\n".join(wrong)

    # The runner's report: in a ConfigMap it created, owned by its benchmark, named in the status.
    status = benchmark(cluster, kube_namespace, "mine")["status"]
    results = cluster.kubectl("get", "configmap", status["resultsConfigMap"], "-n", kube_namespace, "-o", "yaml")
    config_map = yaml.safe_load(results.stdout)
    assert config_map["data"]["report.json"]
    (owner,) = config_map["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("BatchBenchmark", "mine")
    assert owner["uid"] == benchmark(cluster, kube_namespace, "mine")["metadata"]["uid"]


def runner_pod(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The pod whose runner wrote the benchmark's report (its results ConfigMap is named after it)."""
    results = benchmark(cluster, namespace, name)["status"]["resultsConfigMap"]
    found = cluster.kubectl("get", "pod", results.removesuffix("-results"), "-n", namespace, "-o", "yaml").stdout
    pod: dict[str, Any] = yaml.safe_load(found)
    return pod


def the_roles_and_bindings_it_may_create_are_the_runners(cluster: KubeCluster, operator: str, scene: Scene) -> None:
    """What the operator may create, sent as it for an owner it makes up: the API server's RBAC escalation check
    and the chart's operator-writes policy refuse any Role or RoleBinding but the runner's as it makes them, and
    any ConfigMap but its benchmarks' configs."""
    here = scene.namespaces[HERE]
    owned = scene.owned_by(scene.forged_name, scene.forged_uid)
    named = {"name": scene.forged_runner, **owned}
    status_rule = {
        "apiGroups": ["batchmark.dev"],
        "resources": ["batchbenchmarks/status"],
        "resourceNames": [scene.forged_name],
        "verbs": ["get", "patch"],
    }
    create_config_maps = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}
    runner_like = role(scene.forged_runner, status_rule, create_config_maps) | {"metadata": named}
    accepted = create_as(cluster, operator, here, runner_like)
    assert accepted.returncode == 0, accepted.stderr
    for rule in (
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["aws-auth"], "verbs": ["patch"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},  # held, yet refused
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},  # held, yet refused
        {**status_rule, "resourceNames": ["other"]},  # held, yet refused
    ):
        wider = role(scene.forged_runner, status_rule, rule) | {"metadata": named}
        refused = create_as(cluster, operator, here, wider)
        assert refused.returncode != 0, rule
        assert was_refused(refused), (rule, refused.stderr)
    to_admin: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": named,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": scene.forged_runner, "namespace": here}],
    }
    # Benchmark mine's runner Role, which exists and which the operator holds every right of (so that RBAC's
    # check of `bind` lets it through to admission), bound to another account.
    mine_runner = f"mine-runner-{scene.incarnation(scene.mine_uid)}"
    to_other = to_admin | {
        "metadata": {"name": mine_runner, **scene.owned_by("mine", scene.mine_uid)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": mine_runner},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": here}],
    }
    foreign_config_maps: list[tuple[str, dict[str, Any]]] = [
        (SYSTEM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "aws-auth"}}),
        (here, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unowned"}}),
        (here, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-its-config", **owned}}),
    ]
    for namespace, manifest in [(here, to_admin), (here, to_other), *foreign_config_maps]:
        refused = create_as(cluster, operator, namespace, manifest)
        assert refused.returncode != 0, manifest
        assert was_refused(refused), (manifest, refused.stderr)
