"""The operator's few calls to the API server, through the official client, as plain dicts.

Logging in follows kubectl: the pod's service account when there is one, else the kubeconfig (KUBECONFIG or
~/.kube/config), as on the local test cluster whose pods run as processes.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from batchmark.operator import kueue
from batchmark.operator.api import API_VERSION, GROUP, KIND, PLURAL, VERSION

COMPONENT = "batchmark-operator"
MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client logged in as kubectl would be: in-cluster first, then the kubeconfig."""
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
        except ConfigException:
            pass
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


class Kube:
    """Typed-enough access to the objects of a BatchBenchmark; every result is a plain dict (camelCase)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _plain(self, value: Any) -> dict[str, Any]:
        plain: dict[str, Any] = self.api.sanitize_for_serialization(value)  # type: ignore[no-untyped-call]
        return plain

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def patch_status(self, namespace: str, name: str, fields: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": dict(fields)}, _content_type=MERGE_PATCH
        )

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._plain(self.batch.read_namespaced_job(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def suspend_job(self, namespace: str, name: str) -> None:
        """Stop the Job's pods (SIGTERM, then the grace period) without counting them as failures."""
        try:
            self.batch.patch_namespaced_job(name, namespace, {"spec": {"suspend": True}}, _content_type=MERGE_PATCH)
        except ApiException as error:
            if error.status != 404:
                raise

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"batchmark.dev/benchmark={benchmark}")
        return [self._plain(pod) for pod in pods.items]

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create the object; False when it exists already (names are deterministic: a 409 means done)."""
        namespace = manifest["metadata"]["namespace"]
        kind = manifest["kind"]
        try:
            if kind == "ConfigMap":
                self.core.create_namespaced_config_map(namespace, client.V1ConfigMap.model_validate(manifest))
            elif kind == "ServiceAccount":
                self.core.create_namespaced_service_account(namespace, client.V1ServiceAccount.model_validate(manifest))
            elif kind == "Role":
                self.rbac.create_namespaced_role(namespace, client.V1Role.model_validate(manifest))
            elif kind == "RoleBinding":
                self.rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding.model_validate(manifest))
            elif kind == "Job":
                self.batch.create_namespaced_job(namespace, client.V1Job.model_validate(manifest))
            else:
                raise ValueError(f"no creator for {kind}")
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def event(self, benchmark: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        """Record an event on the BatchBenchmark (kubectl describe bb shows them)."""
        metadata = benchmark["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.core.create_namespaced_event(metadata["namespace"], client.CoreV1Event.model_validate(body))


class KueueApi:
    """The operator's reads (and one write) of Kueue's objects."""

    def __init__(self, api: client.ApiClient) -> None:
        self.apis = client.ApisApi(api)
        self.custom = client.CustomObjectsApi(api)

    def installed(self) -> bool:
        """Whether the API server serves Kueue's API (its CRDs are installed). Discovery needs no RBAC."""
        groups = self.apis.get_api_versions().groups or []
        return any(
            group.name == kueue.KUEUE_GROUP
            and any(version.version == kueue.KUEUE_VERSION for version in group.versions or [])
            for group in groups
        )

    def _exists(self, read: Callable[[], object]) -> bool:
        try:
            read()
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return self._exists(
            lambda: self.custom.get_namespaced_custom_object(
                kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, namespace, "localqueues", name
            )
        )

    def priority_class_exists(self, name: str) -> bool:
        return self._exists(
            lambda: self.custom.get_cluster_custom_object(
                kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloadpriorityclasses", name
            )
        )

    def workload_of(self, namespace: str, job_uid: str) -> dict[str, Any] | None:
        """The Workload Kueue made for the Job with this uid, or None before it exists."""
        found = self.custom.list_namespaced_custom_object(
            kueue.KUEUE_GROUP,
            kueue.KUEUE_VERSION,
            namespace,
            "workloads",
            label_selector=f"{kueue.JOB_UID_LABEL}={job_uid}",
        )
        items: list[dict[str, Any]] = cast(dict[str, Any], found).get("items") or []
        return items[0] if items else None

    def deactivate(self, namespace: str, name: str) -> None:
        """Tell Kueue to evict the Workload and keep it out (spec.active false): the way to stop a Job it
        manages, which it would otherwise unsuspend again."""
        self.custom.patch_namespaced_custom_object(
            kueue.KUEUE_GROUP,
            kueue.KUEUE_VERSION,
            namespace,
            "workloads",
            name,
            {"spec": {"active": False}},
            _content_type=MERGE_PATCH,
        )
