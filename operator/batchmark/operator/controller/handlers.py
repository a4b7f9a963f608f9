"""kopf's decorators and its run, the one module that imports kopf: each handler hands its inputs to the
``Dispatch`` in kopf's memo.

The handlers live in their own registry (not kopf's global one), so an operator can run in a thread of a
test process and a second one can start after it. Their shared state (the Reconciler, its threads, the queue
position poller) is one ``Dispatch`` (``dispatch``) in the operator's memo, which kopf copies into every
resource's memo (``run``). What each event leads to is decided there, in plain code the unit tests call
directly; a ``RetryLater`` it raises becomes kopf's ``TemporaryError`` here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import kopf

from batchmark.operator.controller import kueue
from batchmark.operator.controller.dispatch import Dispatch, RetryLater
from batchmark.operator.controller.watched import (
    JOBS_INDEX,
    LOCAL_QUEUES_INDEX,
    PODS_INDEX,
    WORKLOADS_INDEX,
    job_entry,
    local_queue_entry,
    pod_entry,
    workload_entry,
)
from batchmark.operator.controller.workers import KOPF_THREADS
from batchmark.operator.resource.api import GROUP, PLURAL, VERSION

BENCHMARK_LABELS = {"app.kubernetes.io/name": "batchmark", "app.kubernetes.io/component": "benchmark"}
_DISPATCH = "dispatch"


def run(
    dispatch: Dispatch,
    namespaces: Sequence[str],
    liveness_endpoint: str,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run kopf, standalone, with these handlers and ``dispatch`` in its memo, until stopped. Blocks."""
    kopf.run(
        registry=build_registry(),
        memo=kopf.Memo({_DISPATCH: dispatch}),
        standalone=True,
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        liveness_endpoint=liveness_endpoint,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )


def dispatch_of(memo: kopf.Memo) -> Dispatch:
    return cast(Dispatch, memo[_DISPATCH])


@contextmanager
def retried_by_kopf() -> Iterator[None]:
    """A ``RetryLater`` from the dispatch, as kopf's ``TemporaryError``: kopf tries the handler again."""
    try:
        yield
    except RetryLater as error:
        raise kopf.TemporaryError(str(error), delay=error.delay) from error.__cause__


def build_registry() -> kopf.OperatorRegistry:
    """A registry of the operator's handlers; each finds its Dispatch in the memo ``run`` makes."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # As kubectl: the pod's service account, else the kubeconfig (the local cluster's pods are processes).
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
        # Progress in annotations: the status belongs to the schema (and its two writers), not to kopf.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.persistence.finalizer = f"{GROUP}/operator"
        settings.posting.level = 30  # only warnings and errors become events; transitions are posted by us
        settings.posting.reporting_component = "batchmark-operator"
        settings.execution.max_workers = KOPF_THREADS
        # kopf hands its indices among the keyword arguments, made before this handler and kept to the end.
        dispatch_of(memo).start(kwargs)

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        await dispatch_of(memo).stop()

    @kopf.index("batch", "v1", "jobs", labels=BENCHMARK_LABELS, id=JOBS_INDEX, registry=registry)
    async def benchmark_jobs(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return job_entry(namespace, labels, body)

    @kopf.index("", "v1", "pods", labels=BENCHMARK_LABELS, id=PODS_INDEX, registry=registry)
    async def benchmark_pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return pod_entry(namespace, labels, body)

    @kopf.index(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloads", id=WORKLOADS_INDEX, registry=registry)
    async def job_workloads(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return workload_entry(namespace, labels, body)

    @kopf.index(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "localqueues", id=LOCAL_QUEUES_INDEX, registry=registry)
    async def local_queues(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
        return local_queue_entry(namespace, body)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        with retried_by_kopf():
            dispatch_of(memo).ensure(body)

    @kopf.on.field(GROUP, VERSION, PLURAL, field="spec.cancel", registry=registry)
    def cancel_changed(namespace: str | None, name: str, new: Any, memo: kopf.Memo, **_: Any) -> None:
        with retried_by_kopf():
            dispatch_of(memo).cancel_changed(namespace, name, new)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def resource_changed(
        type: str, namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        with retried_by_kopf():
            await dispatch_of(memo).benchmark_event(type, namespace, name, body)

    @kopf.on.event("batch", "v1", "jobs", labels=BENCHMARK_LABELS, registry=registry)
    async def job_changed(
        type: str,
        namespace: str | None,
        name: str,
        labels: kopf.Labels,
        body: kopf.Body,
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        with retried_by_kopf():
            await dispatch_of(memo).child_event("Job", type, namespace, name, labels, body)

    @kopf.on.event("", "v1", "pods", labels=BENCHMARK_LABELS, registry=registry)
    async def pod_changed(
        type: str,
        namespace: str | None,
        name: str,
        labels: kopf.Labels,
        body: kopf.Body,
        memo: kopf.Memo,
        **_: Any,
    ) -> None:
        with retried_by_kopf():
            await dispatch_of(memo).child_event("Pod", type, namespace, name, labels, body)

    # Served from when Kueue's CRDs exist (kopf follows the CRDs).
    @kopf.on.event(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloads", registry=registry)
    async def workload_changed(
        type: str, namespace: str | None, name: str, meta: kopf.Meta, body: kopf.Body, memo: kopf.Memo, **_: Any
    ) -> None:
        with retried_by_kopf():
            await dispatch_of(memo).workload_event(type, namespace, name, meta, body)

    return registry
