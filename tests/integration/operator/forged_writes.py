"""What a stolen token gets: writes forged as the operator's and a runner's own ServiceAccounts (with their tokens,
the runner's bound to its pod as Kubernetes mounts it), sent to the real API server with the chart's RBAC and
admission policies (templates/rbac.yaml, templates/admission.yaml) as installed.

Each is a server-side dry run (`kubectl create|patch --dry-run=server`): authorization and admission run in
full, nothing is stored. FORGED is the promise; charts/batchmark/README.md ("Privileges") shows it (a test of
test_privileges.py checks it does), and test_privileges.py sends every row.

A forged owner is a BatchBenchmark that does not exist, named and given a uid by the attacker: the operator's
ServiceAccount may create objects whose owner reference says anything, so what the policy checks is the
object itself.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# Where a write goes: the benchmarks' namespace, the operator's own (the release's), kube-system.
HERE, OPERATORS, SYSTEM = "the benchmarks' namespace", "the operator's namespace", "kube-system"
OPERATOR_POLICY, RUNNER_POLICY, RBAC = "operator-writes", "runner-writes", "RBAC"


@dataclass(frozen=True)
class Scene:
    """What the forged writes are made of: the two benchmarks `mine` and `other` of one namespace, their runners'
    pods (a runner's token is bound to its pod), and the owner an attacker makes up."""

    namespaces: dict[str, str]  # HERE, OPERATORS, SYSTEM -> the namespace's name
    mine_uid: str
    other_uid: str
    mine_pod: str
    other_pod: str
    forged_name: str = "forged"
    forged_uid: str = "3f0c2a4e-9d1b-4c6a-8e2f-7b5d1a9c0e34"

    @staticmethod
    def incarnation(uid: str) -> str:
        """As batchmark.operator.controller.children.Owner.incarnation names a benchmark's children."""
        return uid.replace("-", "")[:10]

    def owned_by(self, name: str, uid: str) -> dict[str, Any]:
        """Controlled, as the operator's children are."""
        reference = self.referred_to(name, uid)["ownerReferences"][0]
        return {"ownerReferences": [{**reference, "controller": True, "blockOwnerDeletion": True}]}

    @staticmethod
    def referred_to(name: str, uid: str) -> dict[str, Any]:
        """A plain owner reference, as a runner writes its results ConfigMap's (it may not block deletion)."""
        reference = {"apiVersion": "batchmark.dev/v1alpha1", "kind": "BatchBenchmark", "name": name, "uid": uid}
        return {"ownerReferences": [reference]}

    @property
    def forged_runner(self) -> str:
        return f"{self.forged_name}-runner-{self.incarnation(self.forged_uid)}"


@dataclass(frozen=True)
class Forged:
    who: str  # "operator" (the chart's ServiceAccount) or "runner" (benchmark `mine`'s, from its pod)
    sends: str  # in words, as the README shows it
    where: str
    refused_by: str | None  # OPERATOR_POLICY, RUNNER_POLICY, RBAC; None: admitted (what it does itself)
    write: Callable[[Scene], Write]


@dataclass(frozen=True)
class Write:
    """A create of ``manifest``, or a merge patch of a BatchBenchmark's status (``status_of``)."""

    manifest: dict[str, Any]
    status_of: str | None = None


def forged_job(scene: Scene, labelled: bool = True, name: str | None = None, **pod: Any) -> dict[str, Any]:
    """A Job as the operator makes one (its pod as children.job writes it) for the forged owner, ``pod`` merged
    into its pod template's spec (``container_security`` into its container's securityContext); without
    ``labelled``, none of the operator's labels; named ``name`` rather than as its owner."""
    container: dict[str, Any] = {
        "name": "runner",
        "image": "batchmark-runner:0.1.0",
        "command": ["batchmark", "run", "--config", "/etc/batchmark/config.yaml"],
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    spec: dict[str, Any] = {
        "serviceAccountName": scene.forged_runner,
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    for key, value in pod.items():
        if key == "container_security":
            container["securityContext"] = {**container["securityContext"], **value}
        else:
            spec[key] = value
    labels = {"app.kubernetes.io/name": "batchmark", "batchmark.dev/benchmark": scene.forged_name} if labelled else {}
    metadata: dict[str, Any] = {
        "name": name or scene.forged_name,
        **scene.owned_by(scene.forged_name, scene.forged_uid),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**metadata, **({"labels": labels} if labels else {})},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


def forged_jobset(scene: Scene, **pod: Any) -> dict[str, Any]:
    """A JobSet as the operator makes one for a benchmark over several pods (children.jobset), each of its Jobs
    ``forged_job``'s, ``pod`` merged into their pods' spec."""
    job = forged_job(scene, **pod)
    template = {
        "metadata": job["spec"]["template"]["metadata"],
        "spec": {**job["spec"], "completionMode": "Indexed", "completions": 1, "parallelism": 1},
    }
    replicated = {"name": "runner", "replicas": 2, "template": template}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": job["metadata"],
        "spec": {
            "replicatedJobs": [replicated],
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "failurePolicy": {"maxRestarts": 0},
        },
    }


def config_map(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **owner}, "data": {"k": "v"}}


def forged_config_map(scene: Scene, name: str) -> Write:
    return Write(config_map(name, scene.owned_by(scene.forged_name, scene.forged_uid)))


def results_of(pod: str) -> str:
    """The results ConfigMap a runner creates (batchmark.runner.observe.statuswriter)."""
    return f"{pod}-results"


def runner_config_map(name: str, owner: str, owner_uid: str) -> Write:
    return Write(config_map(name, Scene.referred_to(owner, owner_uid)))


def status_naming(benchmark: str, config_map_name: str) -> Write:
    return Write({"status": {"resultsConfigMap": config_map_name}}, status_of=benchmark)


PRIVILEGED: dict[str, Any] = {"container_security": {"privileged": True, "allowPrivilegeEscalation": True}}
# fmt: off
FORGED = [
    # The operator's token: only its benchmarks' children, as it makes them, and nowhere protected.
    Forged("operator", "a Job as it makes them, for a forged owner", HERE, None, lambda s: Write(forged_job(s))),
    Forged("operator", "that Job in kube-system, as `generic-garbage-collector`", SYSTEM, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, serviceAccountName="generic-garbage-collector"))),
    Forged("operator", "that Job in its own namespace", OPERATORS, OPERATOR_POLICY, lambda s: Write(forged_job(s))),
    Forged("operator", "that Job as another ServiceAccount (`default`)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, serviceAccountName="default"))),
    Forged("operator", "that Job with `hostNetwork`", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, hostNetwork=True))),
    Forged("operator", "that Job with `hostPID`", HERE, OPERATOR_POLICY, lambda s: Write(forged_job(s, hostPID=True))),
    Forged("operator", "that Job mounting the host's `/` (hostPath)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, volumes=[{"name": "host", "hostPath": {"path": "/"}}]))),
    Forged("operator", "that Job with a privileged container", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, **PRIVILEGED))),
    Forged("operator", "that Job with a privileged container, without the operator's labels", HERE,
           OPERATOR_POLICY, lambda s: Write(forged_job(s, labelled=False, **PRIVILEGED))),
    Forged("operator", "that Job adding a capability (`SYS_ADMIN`)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, container_security={"capabilities": {"add": ["SYS_ADMIN"]}}))),
    Forged("operator", "that Job as root (`runAsUser: 0`)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, container_security={"runAsUser": 0, "runAsNonRoot": False}))),
    Forged("operator", "that Job named otherwise than its owner", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_job(s, name="forged-2"))),
    Forged("operator", "a JobSet as it makes them, for a forged owner", HERE, None,
           lambda s: Write(forged_jobset(s))),
    Forged("operator", "that JobSet as another ServiceAccount (`default`)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_jobset(s, serviceAccountName="default"))),
    Forged("operator", "that JobSet with a privileged container", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_jobset(s, **PRIVILEGED))),
    Forged("operator", "that JobSet mounting the host's `/` (hostPath)", HERE, OPERATOR_POLICY,
           lambda s: Write(forged_jobset(s, volumes=[{"name": "host", "hostPath": {"path": "/"}}]))),
    Forged("operator", "a ConfigMap as it names them, for a forged owner", HERE, None,
           lambda s: forged_config_map(s, f"{s.forged_name}-config-{s.incarnation(s.forged_uid)}")),
    Forged("operator", "ConfigMap `aws-auth`, for a forged owner", SYSTEM, OPERATOR_POLICY,
           lambda s: forged_config_map(s, "aws-auth")),
    Forged("operator", "a ConfigMap named otherwise, for a forged owner", HERE, OPERATOR_POLICY,
           lambda s: forged_config_map(s, f"{s.forged_name}-settings")),
    # A runner's token (from its pod): its own pod's results ConfigMap, owned by its own benchmark, and its
    # benchmark's status naming only that.
    Forged("runner", "a results ConfigMap of its pod, owned by its benchmark", HERE, None,
           lambda s: runner_config_map(results_of(s.mine_pod) + "-2", "mine", s.mine_uid)),
    Forged("runner", "another benchmark's results ConfigMap", HERE, RUNNER_POLICY,
           lambda s: runner_config_map(results_of(s.other_pod) + "-2", "other", s.other_uid)),
    Forged("runner", "a results ConfigMap of its pod, owned by another benchmark", HERE, RUNNER_POLICY,
           lambda s: runner_config_map(results_of(s.mine_pod) + "-3", "other", s.other_uid)),
    Forged("runner", "a ConfigMap of another name, owned by its benchmark", HERE, RUNNER_POLICY,
           lambda s: runner_config_map("mine-report", "mine", s.mine_uid)),
    Forged("runner", "ConfigMap `aws-auth`, owned by its benchmark", SYSTEM, RBAC,
           lambda s: runner_config_map("aws-auth", "mine", s.mine_uid)),
    Forged("runner", "its benchmark's status naming its results ConfigMap", HERE, None,
           lambda s: status_naming("mine", results_of(s.mine_pod))),
    Forged("runner", "its benchmark's status naming another ConfigMap", HERE, RUNNER_POLICY,
           lambda s: status_naming("mine", results_of(s.other_pod))),
    Forged("runner", "another benchmark's status", HERE, RBAC,
           lambda s: status_naming("other", results_of(s.mine_pod))),
]
# fmt: on


def markdown_table() -> str:
    """FORGED as charts/batchmark/README.md shows it."""
    lines = ["| Who | Sends | Where | Admitted | Refused by |", "|---|---|---|---|---|"]
    for case in FORGED:
        refused_by = {None: "", RBAC: "RBAC"}.get(case.refused_by, f"`<release>-{case.refused_by}`")
        admitted = "yes" if case.refused_by is None else "**no**"
        lines.append(f"| {case.who} | {case.sends} | {case.where} | {admitted} | {refused_by} |")
    return "\n".join(lines) + "\n"


def send(kubectl: Path, kubeconfig: Path, namespace: str, write: Write) -> subprocess.CompletedProcess[str]:
    """The write as a server-side dry run, with the credentials of ``kubeconfig``."""
    common = [str(kubectl), f"--kubeconfig={kubeconfig}", "-n", namespace]
    if write.status_of is not None:
        arguments = ["patch", "batchbenchmarks.batchmark.dev", write.status_of, "--subresource=status"]
        arguments += ["--type=merge", "-p", json.dumps(write.manifest), "--dry-run=server"]
        return subprocess.run([*common, *arguments], capture_output=True, text=True, timeout=60, check=False)
    return subprocess.run(
        [*common, "create", "-f", "-", "--dry-run=server"],
        input=yaml.safe_dump(write.manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refusal_of(answer: subprocess.CompletedProcess[str], release_prefix: str) -> str | None:
    """Who refused the write (OPERATOR_POLICY, RUNNER_POLICY or RBAC), None when it was admitted; anything else
    (an invalid object, a conflict) is a mistake of the case, not an answer."""
    if answer.returncode == 0:
        return None
    said = answer.stderr
    for policy in (OPERATOR_POLICY, RUNNER_POLICY):
        if f"ValidatingAdmissionPolicy '{release_prefix}-{policy}' with binding" in said and "denied request" in said:
            return policy
    if "is forbidden: User " in said and " cannot " in said:
        return RBAC
    raise AssertionError(f"neither admitted nor refused: {said}")


def wrong_answers(kubectl: Path, kubeconfigs: dict[str, Path], scene: Scene, release_prefix: str) -> list[str]:
    """Every row of FORGED sent as its sender; the rows whose answer differs from the table's, each said."""
    wrong = []
    for case in FORGED:
        answer = send(kubectl, kubeconfigs[case.who], scene.namespaces[case.where], case.write(scene))
        refused_by = refusal_of(answer, release_prefix)
        if refused_by != case.refused_by:
            wrong.append(f"{case.who}: {case.sends} in {case.where}: {refused_by or 'admitted'}: {answer.stderr}")
    return wrong
