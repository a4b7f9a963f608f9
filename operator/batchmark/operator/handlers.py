"""kopf's decorators, and nothing else: each handler hands its typed inputs to the Reconciler.

The handlers live in their own registry (not kopf's global one), so an operator can run in a thread of a
test process and a second one can start after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from batchmark.operator import kueue
from batchmark.operator.api import GROUP, PLURAL, VERSION
from batchmark.operator.reconcile import Reconciler
from batchmark.operator.status import benchmark_signature, child_signature

BENCHMARK_LABELS = {"app.kubernetes.io/name": "batchmark", "app.kubernetes.io/component": "benchmark"}
RETRY_DELAY_SECONDS = 2.0


def build_registry(reconciler: Reconciler) -> kopf.OperatorRegistry:
    """A registry of the operator's handlers, all bound to this reconciler."""
    registry = kopf.OperatorRegistry()

    def timed(action: Callable[[], Any]) -> None:
        started = time.perf_counter()
        outcome = "success"
        try:
            action()
        except (ApiException, HTTPError, OSError) as error:
            outcome = "retry"
            raise kopf.TemporaryError(f"API server: {error}", delay=RETRY_DELAY_SECONDS) from error
        except Exception:
            outcome = "error"
            raise
        finally:
            reconciler.metrics.observe_reconcile(outcome, time.perf_counter() - started)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # As kubectl: the pod's service account, else the kubeconfig (the local cluster's pods are processes).
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Progress in annotations: the status belongs to the schema (and its two writers), not to kopf.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.persistence.finalizer = f"{GROUP}/operator"
        settings.posting.level = 30  # only warnings and errors become events; transitions are posted by us
        settings.posting.reporting_component = "batchmark-operator"
        settings.execution.max_workers = 16

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(body: kopf.Body, **_: Any) -> None:
        timed(lambda: reconciler.ensure(body))

    @kopf.on.field(GROUP, VERSION, PLURAL, field="spec.cancel", registry=registry)
    def cancel_changed(namespace: str | None, name: str, new: Any, **_: Any) -> None:
        if new and namespace:
            timed(lambda: reconciler.cancel(namespace, name))

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def resource_changed(type: str, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> None:
        if not namespace:
            return
        if type == "DELETED":
            reconciler.forget(namespace, name)
        # Also on the initial listing (type None): a restarted operator restores its result gauges.
        elif reconciler.worth_refreshing(("benchmark", namespace, name), benchmark_signature(body)):
            timed(lambda: reconciler.refresh(namespace, name))

    def child_changed(kind: str) -> Callable[..., None]:
        def handler(
            type: str, namespace: str | None, name: str, labels: kopf.Labels, body: kopf.Body, **_: Any
        ) -> None:
            benchmark = labels.get("batchmark.dev/benchmark")
            signature = None if type == "DELETED" else child_signature(kind, body)
            if benchmark and namespace and reconciler.worth_refreshing((kind, namespace, name), signature):
                timed(lambda: reconciler.refresh(namespace, benchmark))

        return handler

    kopf.on.event("batch", "v1", "jobs", labels=BENCHMARK_LABELS, registry=registry)(child_changed("Job"))
    kopf.on.event("", "v1", "pods", labels=BENCHMARK_LABELS, registry=registry)(child_changed("Pod"))

    # Kueue's Workload of a queued benchmark's Job (Job name = benchmark name): admission, the reason it waits,
    # preemption. Served from when Kueue's CRDs exist (kopf follows the CRDs).
    @kopf.on.event(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloads", registry=registry)
    def workload_changed(namespace: str | None, meta: kopf.Meta, **_: Any) -> None:
        owners = meta.get("ownerReferences") or []
        job = next((owner["name"] for owner in owners if owner.get("kind") == "Job"), None)
        if job and namespace:
            timed(lambda: reconciler.refresh(namespace, job))

    return registry
