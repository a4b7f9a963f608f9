"""The operator's few calls to the API server, through the official client, as plain dicts.

Logging in follows kubectl: the pod's service account when there is one, else the kubeconfig (KUBECONFIG or
~/.kube/config), as on the local test cluster whose pods run as processes.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from batchmark.operator.controller import kueue, positions
from batchmark.operator.controller.jobset import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from batchmark.operator.controller.status import controller_uid
from batchmark.operator.resource.api import API_VERSION, GROUP, KIND, PLURAL, VERSION

COMPONENT = "batchmark-operator"
MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: str | None = None, connections: int | None = None) -> client.ApiClient:
    """A client logged in as kubectl would be: in-cluster first, then the kubeconfig.

    ``connections``: how many connections to the API server its pool keeps open. The client's default (5 per
    core) is fewer than the operator's threads on a small node, and each thread beyond it would open, and
    then drop, a TLS connection per call.
    """
    configuration: client.Configuration | None = None
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            configuration = client.Configuration.get_default_copy()
        except ConfigException:
            pass
    if configuration is None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


# Where each kind the operator creates lives in the API.
_COLLECTIONS = {
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    "Job": "/apis/batch/v1/namespaces/{namespace}/jobs",
    "JobSet": f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}/namespaces/{{namespace}}/{JOBSET_PLURAL}",
}
_BENCHMARKS = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}"


class ForeignChild(Exception):
    """A child's name is taken by an object this benchmark does not own: never adopted, created again later."""


class Kube:
    """Typed-enough access to the objects of a BatchBenchmark; every result is a plain dict (camelCase).

    The requests go through the official client's transport (its login, TLS and connection pool) but not
    its typed models: it would validate each body into pydantic models and parse each response into them,
    which costs the operator more CPU per event than everything else it does, for dicts it then turns back
    into the JSON the API server sent. Here a body goes out as the dict it is and a response is read as JSON.
    """

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._jobset_served = False

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One call to the API server; its JSON answer, or ApiException (with .status) for an error."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=data.decode(errors="replace"), data=None)
        parsed: dict[str, Any] = json.loads(data) if data else {}
        return parsed

    def _read(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any] | None:
        """A GET; None when the object does not exist."""
        try:
            return self.request("GET", path, query=query)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(f"{_BENCHMARKS.format(namespace=namespace)}/{name}")

    def patch_status(self, namespace: str, name: str, fields: Mapping[str, Any]) -> None:
        path = f"{_BENCHMARKS.format(namespace=namespace)}/{name}/status"
        self.request("PATCH", path, {"status": dict(fields)}, content_type=MERGE_PATCH)

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        """The ConfigMap; ApiException (404 included) when it cannot be read."""
        return self.request("GET", f"{_COLLECTIONS['ConfigMap'].format(namespace=namespace)}/{name}")

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(f"{_COLLECTIONS['Job'].format(namespace=namespace)}/{name}")

    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(f"{_COLLECTIONS['JobSet'].format(namespace=namespace)}/{name}")

    def suspend_job(self, namespace: str, name: str) -> None:
        """Stop the Job's pods (SIGTERM, then the grace period) without counting them as failures."""
        self._suspend("Job", namespace, name)

    def suspend_jobset(self, namespace: str, name: str) -> None:
        """Stop all the JobSet's pods, as ``suspend_job`` a Job's."""
        self._suspend("JobSet", namespace, name)

    def _suspend(self, kind: str, namespace: str, name: str) -> None:
        try:
            path = f"{_COLLECTIONS[kind].format(namespace=namespace)}/{name}"
            self.request("PATCH", path, {"spec": {"suspend": True}}, content_type=MERGE_PATCH)
        except ApiException as error:
            if error.status != 404:
                raise

    def jobset_served(self) -> bool:
        """Whether the API server serves JobSet's API (its CRD is installed); discovery needs no RBAC. Once it
        answered yes it is not asked again (as KueueApi.installed); until then, each time, so that JobSet
        installed after the operator started is found."""
        if self._jobset_served:
            return True
        try:
            self.request("GET", f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}")
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        self._jobset_served = True
        return True

    def list_pods(self, namespace: str, benchmark: str) -> list[dict[str, Any]]:
        query = [("labelSelector", f"batchmark.dev/benchmark={benchmark}")]
        found = self._read(f"/api/v1/namespaces/{namespace}/pods", query) or {}
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create the object; False when this benchmark made it already.

        Names are deterministic, so a 409 means "done" only when the object found is this benchmark's: a Job
        (named as its benchmark) may still be the previous one's, deleted a moment ago and not yet removed by
        the garbage collector; then ForeignChild, and the caller tries again later. The other children's names
        carry the benchmark's uid (batchmark.operator.controller.children), so theirs cannot be another benchmark's, and
        the operator needs no right to read them.
        """
        namespace = manifest["metadata"]["namespace"]
        kind = manifest["kind"]
        if kind not in _COLLECTIONS:
            raise ValueError(f"no creator for {kind}")
        try:
            self.request("POST", _COLLECTIONS[kind].format(namespace=namespace), manifest)
        except ApiException as error:
            if error.status != 409:
                raise
            if kind in ("Job", "JobSet"):
                self._check_owner(manifest)
            return False
        return True

    def _check_owner(self, manifest: Mapping[str, Any]) -> None:
        """ForeignChild unless the existing object of the manifest's name has the manifest's controller."""
        metadata = manifest["metadata"]
        wanted = controller_uid(metadata)
        path = f"{_COLLECTIONS[manifest['kind']].format(namespace=metadata['namespace'])}/{metadata['name']}"
        found = self._read(path)
        if found is None:
            raise ForeignChild(f"{manifest['kind']} {metadata['name']} existed and is gone: create it again")
        if controller_uid(found.get("metadata") or {}) != wanted:
            raise ForeignChild(
                f"{manifest['kind']} {metadata['name']} belongs to another object (a previous benchmark of the"
                " same name, which the garbage collector has not removed yet)"
            )

    def event(self, benchmark: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        """Record an event on the BatchBenchmark (kubectl describe bb shows them)."""
        metadata = benchmark["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
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
        self.request("POST", f"/api/v1/namespaces/{metadata['namespace']}/events", body)


class KueueApi:
    """The operator's reads (and one write) of Kueue's objects."""

    def __init__(self, api: client.ApiClient) -> None:
        self.apis = client.ApisApi(api)
        self.custom = client.CustomObjectsApi(api)
        self.kube = Kube(api)
        self._served = False  # Kueue's API was found served (``installed``)

    def pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any]:
        """The LocalQueue's pending Workloads with their positions (Kueue's visibility API, an aggregated API:
        404 or 503 where no visibility server is registered or it is down); ApiException on an error."""
        path = (
            f"/apis/{positions.VISIBILITY_GROUP}/{positions.VISIBILITY_VERSION}/namespaces/{namespace}"
            f"/localqueues/{local_queue}/pendingworkloads"
        )
        return self.kube.request("GET", path)

    def installed(self) -> bool:
        """Whether the API server serves Kueue's API (its CRDs are installed). Discovery needs no RBAC.

        Once it answered yes, it is not asked again: asked for each queued benchmark, it was a round trip before
        their children when hundreds were applied at once. (Kueue uninstalled later: their LocalQueues are gone
        too, and the benchmark is refused for that.) Until then it is asked each time, so that Kueue installed
        after the operator started is found."""
        if self._served:
            return True
        groups = self.apis.get_api_versions().groups or []
        self._served = any(
            group.name == kueue.KUEUE_GROUP
            and any(version.version == kueue.KUEUE_VERSION for version in group.versions or [])
            for group in groups
        )
        return self._served

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
