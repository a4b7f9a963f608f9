"""The objects a BatchBenchmark owns, built as plain manifests (names are deterministic: a 409 on create means done)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from batchmark.operator.controller import kueue
from batchmark.operator.controller.jobset import JOB_INDEX_LABEL, JOBSET_API_VERSION, REPLICATED_JOB
from batchmark.operator.controller.status import NOT_RETRIED_EXIT_CODES, RUNNER_CONTAINER
from batchmark.operator.resource.api import (
    API_VERSION,
    DEFAULT_CPU_IMAGE,
    DEFAULT_IMAGE,
    GPU_RESOURCE,
    GROUP,
    KIND,
    PLURAL,
    S3_CREDENTIAL_KEYS,
    S3_ENDPOINT_VARIABLE,
    S3_OPTIONAL_CREDENTIAL_KEYS,
    S3_REGION_VARIABLE,
    BatchBenchmarkSpec,
    ResultsStore,
    RunnerIdentity,
)
from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import (
    CONFIG_DIRECTORY,
    CONFIG_KEY,
    CONFIG_PATH,
    ENGINE_RENDEZVOUS_PORT,
    ENV_DATA_DIRECTORY,
    ENV_ENGINE_NODES,
    ENV_LEADER,
    ENV_MEMBER,
    ENV_MEMBER_ADDRESS,
    ENV_MEMBERS,
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_POD,
    ENV_TERMINATION,
    ENV_UID,
    MEMBER_REPORT_PORT,
    STORE_MOUNT_PATH,
    TERMINATION_MESSAGE_PATH,
)
from batchmark.runner.engines.registry import engine_entry

SHM_PATH = "/dev/shm"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# Time the runner gets after SIGTERM (cancel, deletion) to write its partial results.
TERMINATION_GRACE_SECONDS = 60


def labels(name: str) -> dict[str, str]:
    """The labels of every benchmark object and pod (a PodMonitor selects on them)."""
    return {
        "app.kubernetes.io/name": "batchmark",
        "app.kubernetes.io/component": "benchmark",
        "batchmark.dev/benchmark": name,
    }


@dataclass(frozen=True)
class Owner:
    """The BatchBenchmark the objects belong to."""

    namespace: str
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    @property
    def incarnation(self) -> str:
        """A short part of the uid: names of children that differ between a benchmark and one of the same name
        applied after it, so a 409 on their creation can only mean this benchmark made them already, never that
        the previous one's are still there while the garbage collector removes them."""
        return self.uid.replace("-", "")[:10]

    def metadata(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": labels(self.name),
            "ownerReferences": [self.reference()],
        }

    @property
    def config_map(self) -> str:
        return f"{self.name}-config-{self.incarnation}"

    @property
    def runner(self) -> str:
        """The runner's ServiceAccount, its Role and RoleBinding."""
        return f"{self.name}-runner-{self.incarnation}"


def config_map(owner: Owner, config: RunConfig) -> dict[str, Any]:
    text = yaml.safe_dump(config.model_dump(mode="json", exclude={"outputs"}), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owner.metadata(owner.config_map),
        "data": {CONFIG_KEY: text},
    }


def service_account(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": owner.metadata(owner.runner)}


def role(owner: Owner) -> dict[str, Any]:
    """The runner may read and patch this one resource's status, and create the ConfigMap of its full report.

    Only rules the operator holds itself, so that it needs no `escalate`: `create` cannot be narrowed to a name
    (the name is not known before), so the runner may create ConfigMaps in its namespace but never read or
    change one; it writes its report once, into a ConfigMap it creates (batchmark.runner.observe.statuswriter)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": owner.metadata(owner.runner),
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [owner.name],
                "verbs": ["get", "patch"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        ],
    }


def role_binding(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": owner.metadata(owner.runner),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": owner.runner},
        "subjects": [{"kind": "ServiceAccount", "name": owner.runner, "namespace": owner.namespace}],
    }


def gpu_count(spec: BatchBenchmarkSpec) -> int:
    """GPUs one pod's engines need: per replica, vLLM's tensor_parallel_size x pipeline_parallel_size of
    vllmConfig (over the pods one replica spans), times the pod's replicas; none on cpu."""
    return 0 if spec.device == "cpu" else spec.replica_gpus * spec.pod_replicas


def workload(
    owner: Owner,
    spec: BatchBenchmarkSpec,
    workload_priority_class: str | None = None,
    identity: RunnerIdentity = RunnerIdentity(),  # noqa: B008 (frozen: one shared instance is safe)
) -> dict[str, Any]:
    """What runs the benchmark: its Job, or above one pod its JobSet."""
    if spec.pods > 1:
        return jobset(owner, spec, workload_priority_class, identity)
    return job(owner, spec, workload_priority_class, identity)


def job(
    owner: Owner,
    spec: BatchBenchmarkSpec,
    workload_priority_class: str | None = None,
    identity: RunnerIdentity = RunnerIdentity(),  # noqa: B008 (frozen: one shared instance is safe)
) -> dict[str, Any]:
    """The Job that runs ``batchmark run`` on the config ConfigMap, as the runner's ServiceAccount, with the IDs
    of ``identity`` (the operator's defaults; those it leaves null, the platform assigns).

    With ``spec.queueName`` it is created suspended, labelled with its Kueue LocalQueue (and its
    WorkloadPriorityClass, when the caller found one): Kueue unsuspends it when it admits it."""
    job_spec = _job_spec(owner, spec, identity)
    job_spec["backoffLimit"] = spec.retries
    job_spec["podFailurePolicy"] = _not_retried()
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    metadata = owner.metadata(owner.name)
    if spec.queue_name is not None:
        job_spec["suspend"] = True
        metadata["labels"] |= kueue.job_labels(spec.queue_name, workload_priority_class)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def jobset(
    owner: Owner,
    spec: BatchBenchmarkSpec,
    workload_priority_class: str | None = None,
    identity: RunnerIdentity = RunnerIdentity(),  # noqa: B008 (frozen: one shared instance is safe)
) -> dict[str, Any]:
    """The JobSet of a benchmark over several pods: ``spec.pods`` Jobs of one pod each, every pod the Job's pod of
    a one-pod benchmark plus its index (the runner names itself member <index> of <pods> by it). All succeed or
    the benchmark fails: one pod that fails fails the JobSet (and JobSet stops the others), which is restarted
    whole ``spec.retries`` times, unless its runner exited with one of NOT_RETRIED_EXIT_CODES. Every field
    JobSet's defaulting webhook would set is written out, so the JobSet runs the same where that webhook does not
    run.

    With ``spec.queueName`` it is created suspended with Kueue's labels, and Kueue admits it as one workload."""
    job_spec = _job_spec(owner, spec, identity, members=spec.pods)
    job_spec |= {"backoffLimit": 0, "completionMode": "Indexed", "completions": 1, "parallelism": 1}
    job_spec["podFailurePolicy"] = _not_retried()
    set_spec: dict[str, Any] = {
        "replicatedJobs": [
            {
                "name": REPLICATED_JOB,
                "replicas": spec.pods,
                "template": {"metadata": {"labels": labels(owner.name)}, "spec": job_spec},
            }
        ],
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All"},
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "failurePolicy": {
            "maxRestarts": spec.retries,
            # A Job that its pod failure policy failed (_not_retried) fails the JobSet, not restarts it.
            "rules": [{"name": "NotRetried", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
        },
    }
    if spec.ttl_seconds_after_finished is not None:
        set_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    metadata = owner.metadata(owner.name)
    if spec.queue_name is not None:
        set_spec["suspend"] = True
        metadata["labels"] |= kueue.job_labels(spec.queue_name, workload_priority_class)
    return {"apiVersion": JOBSET_API_VERSION, "kind": "JobSet", "metadata": metadata, "spec": set_spec}


def _not_retried() -> dict[str, Any]:
    """A Job's pod failure policy that fails it at once when the runner exits with one of NOT_RETRIED_EXIT_CODES:
    another attempt would only repeat the same work."""
    exits = {"containerName": RUNNER_CONTAINER, "operator": "In", "values": list(NOT_RETRIED_EXIT_CODES)}
    return {"rules": [{"action": "FailJob", "onExitCodes": exits}]}


def leader_address(owner: Owner) -> str:
    """Pod 0's stable name, as the other pods of the JobSet resolve it."""
    return member_address(owner, "0")


def member_address(owner: Owner, member: str) -> str:
    """A member pod's stable name, as the other pods of the JobSet resolve it: the Indexed Job's pod hostname
    `<job>-<pod index>` under the JobSet's headless Service (named as the JobSet), in the pods' own namespace."""
    return f"{owner.name}-{REPLICATED_JOB}-{member}-0.{owner.name}"


def _job_spec(owner: Owner, spec: BatchBenchmarkSpec, identity: RunnerIdentity, members: int = 1) -> dict[str, Any]:
    """A Job's spec of one runner pod (without what differs between a Job and a JobSet's Job)."""
    gpus = gpu_count(spec)
    command, ports = runner_command(spec)
    env, mounts, volumes = runner_environment(owner, spec)
    if members > 1:
        index = {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX_LABEL}']"}}
        env += [
            {"name": ENV_MEMBER, "valueFrom": index},
            {"name": ENV_MEMBERS, "value": str(members)},
            {"name": ENV_LEADER, "value": leader_address(owner)},
        ]
        ports.append({"name": "member-reports", "containerPort": MEMBER_REPORT_PORT, "protocol": "TCP"})
    if spec.engine_nodes > 1:
        env += [
            {"name": ENV_ENGINE_NODES, "value": str(spec.engine_nodes)},
            {"name": ENV_MEMBER_ADDRESS, "value": member_address(owner, "{member}")},
            # vLLM's workers bind their queues and gloo pairs to it, and tell the other nodes to reach them there.
            {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
        ports.append({"name": "engine-nodes", "containerPort": ENGINE_RENDEZVOUS_PORT, "protocol": "TCP"})
    container: dict[str, Any] = {
        "name": RUNNER_CONTAINER,
        "image": spec.image or (DEFAULT_CPU_IMAGE if spec.device == "cpu" else DEFAULT_IMAGE),
        "command": command,
        "env": env,
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if ports:
        container["ports"] = ports
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if spec.env_from:
        container["envFrom"] = list(spec.env_from)
    container["resources"] = resources(spec, gpus)
    tolerations = [item.model_dump(by_alias=True, exclude_none=True) for item in spec.tolerations or []]
    if spec.tolerations is None and _asks_for_gpus(container.get("resources") or {}):
        tolerations.append(GPU_TOLERATION)  # GPU nodes carry the nvidia.com/gpu taint
    pod: dict[str, Any] = {
        "serviceAccountName": owner.runner,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": {
            "runAsNonRoot": True,
            **identity.pod_fields(),
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    optional = {
        "tolerations": tolerations or None,
        "nodeSelector": spec.node_selector,
        "affinity": spec.affinity,
        "priorityClassName": spec.priority_class_name,
        "runtimeClassName": spec.runtime_class_name,
        "imagePullSecrets": [ref.model_dump() for ref in spec.image_pull_secrets] if spec.image_pull_secrets else None,
    }
    pod.update({key: value for key, value in optional.items() if value is not None})
    job_spec: dict[str, Any] = {"template": {"metadata": {"labels": labels(owner.name)}, "spec": pod}}
    if spec.timeout is not None:
        job_spec["activeDeadlineSeconds"] = spec.timeout
    return job_spec


def runner_command(spec: BatchBenchmarkSpec) -> tuple[list[str], list[dict[str, Any]]]:
    """``batchmark run`` on the mounted config, and the container's ports: /metrics when the spec serves it."""
    command = ["batchmark", "run", "--config", CONFIG_PATH, "--quiet"]
    ports: list[dict[str, Any]] = []
    if spec.metrics.enabled:
        command += ["--metrics-address", "0.0.0.0", "--metrics-port", str(spec.metrics.port)]
        command += ["--metrics-linger", repr(spec.metrics.linger_seconds)]
        ports.append({"name": "metrics", "containerPort": spec.metrics.port, "protocol": "TCP"})
    if spec.metrics.pushgateway:
        command += ["--pushgateway", spec.metrics.pushgateway]
    return command, ports


def runner_environment(
    owner: Owner, spec: BatchBenchmarkSpec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The runner container's environment (the contract's variables, the caches, the token, an S3 store's
    endpoint, region and credentials) and its volumes: the config, shared memory, the model cache, the user's
    data and a results store's claim, where the spec gives them. The spec's own env comes last."""
    env: list[dict[str, Any]] = [
        {"name": ENV_NAMESPACE, "value": owner.namespace},
        {"name": ENV_NAME, "value": owner.name},
        {"name": ENV_UID, "value": owner.uid},
        {"name": ENV_POD, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": ENV_TERMINATION, "value": TERMINATION_MESSAGE_PATH},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIRECTORY, "readOnly": True},
        {"name": "dshm", "mountPath": SHM_PATH},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": owner.config_map}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(spec.shm_size)}},
    ]
    store = spec.results.store if spec.results is not None else None
    if store is not None and store.claim_name is not None:
        mounts.append({"name": "results-store", "mountPath": STORE_MOUNT_PATH})
        volumes.append({"name": "results-store", "persistentVolumeClaim": {"claimName": store.claim_name}})
    elif store is not None:
        env += s3_store_environment(store)
    if spec.model_cache is not None:
        mounts.append({"name": "model-cache", "mountPath": spec.model_cache.mount_path})
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": spec.model_cache.claim_name}})
        env.append({"name": "HF_HOME", "value": spec.model_cache.mount_path})
    if spec.data_volume is not None:
        mounts.append({"name": "data", "mountPath": spec.data_volume.mount_path, "readOnly": True})
        env.append({"name": ENV_DATA_DIRECTORY, "value": spec.data_volume.mount_path})
        if spec.data_volume.config_map is not None:
            volumes.append({"name": "data", "configMap": {"name": spec.data_volume.config_map}})
        else:
            claim = {"claimName": spec.data_volume.claim_name, "readOnly": True}
            volumes.append({"name": "data", "persistentVolumeClaim": claim})
    if spec.hf_token_secret is not None:
        secret = {"name": spec.hf_token_secret.name, "key": spec.hf_token_secret.key}
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}})
    env += [item.model_dump(by_alias=True, exclude_none=True) for item in spec.env or []]
    return env, mounts, volumes


def s3_store_environment(store: ResultsStore) -> list[dict[str, Any]]:
    """Where the runner finds an S3 store's bucket, the AWS way: the endpoint and the region where the store
    names them, and the credentials from its Secret, by reference (the operator never reads them); without a
    Secret, the pod's own identity. The spec's env never sets these too (BatchBenchmarkSpec refuses it)."""
    env: list[dict[str, Any]] = []
    if store.endpoint is not None:
        env.append({"name": S3_ENDPOINT_VARIABLE, "value": store.endpoint})
    if store.region is not None:
        env.append({"name": S3_REGION_VARIABLE, "value": store.region})
    if store.credentials_secret is not None:
        for key in S3_CREDENTIAL_KEYS:
            secret: dict[str, Any] = {"name": store.credentials_secret, "key": key}
            if key in S3_OPTIONAL_CREDENTIAL_KEYS:
                secret["optional"] = True
            env.append({"name": key, "valueFrom": {"secretKeyRef": secret}})
    return env


def resources(spec: BatchBenchmarkSpec, gpus: int) -> dict[str, dict[str, str]]:
    """spec.resources merged with what the engine needs (its registry entry's pod needs): its GPUs, unless the
    spec names nvidia.com/gpu itself (0 included), and CPU and memory requests where neither a request nor a
    limit is given (a pod with none is the first the kubelet evicts)."""
    given = spec.resources.model_dump(exclude_none=True) if spec.resources is not None else {}
    # Quantities as strings, as the API writes them back (2 and "2" are the same quantity).
    limits = {resource: str(amount) for resource, amount in (given.get("limits") or {}).items()}
    requests = {resource: str(amount) for resource, amount in (given.get("requests") or {}).items()}
    if spec.device == "cpu":  # the spec's own are refused; the operator's defaults may name GPUs for the others
        limits.pop(GPU_RESOURCE, None)
        requests.pop(GPU_RESOURCE, None)
    if gpus and GPU_RESOURCE not in limits and GPU_RESOURCE not in requests:
        limits[GPU_RESOURCE] = str(gpus)
    for resource, amount in engine_entry(spec.backend.engine).pod.requests.items():
        if resource not in requests and resource not in limits:
            requests[resource] = amount
    return {kind: amounts for kind, amounts in (("limits", limits), ("requests", requests)) if amounts}


def _asks_for_gpus(resources: dict[str, dict[str, str]]) -> bool:
    return any(GPU_RESOURCE in amounts and amounts[GPU_RESOURCE] not in ("0", "") for amounts in resources.values())
