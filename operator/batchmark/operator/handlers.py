"""kopf's decorators, and nothing else: each handler hands its typed inputs to the Reconciler.

The handlers live in their own registry (not kopf's global one), so an operator can run in a thread of a
test process and a second one can start after it.

The benchmarks' Jobs, pods and Workloads are kept in kopf's indices (batchmark.operator.watched), and their
events are handled in kopf's event loop: an event that changes nothing the status reads costs no thread, and a
refresh is handed to a worker thread only when none is already waiting for that benchmark (the waiting one
reads the state after this event too). With hundreds of benchmarks, every runner's progress patch and every
pod update is an event: queued one thread-pool job each, they delayed the ones that matter.

Refreshes have threads of their own, apart from kopf's, which run the create handlers: when hundreds of
benchmarks are applied at once, their creations (a dozen calls each) would otherwise hold every thread. And a
refresh after a Job finished goes before the routine ones (batchmark.operator.workers): a benchmark that
finished is marked so without waiting for every pod and runner update queued before it.

Queue positions change with no event on a benchmark (another one was admitted): one task polls them
(batchmark.operator.positions) and refreshes only the benchmarks whose position moved, at a bounded rate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from batchmark.operator import kueue
from batchmark.operator.api import GROUP, PLURAL, VERSION
from batchmark.operator.kube import ForeignChild
from batchmark.operator.reconcile import CHILD_CREATORS, Reconciler
from batchmark.operator.status import JobView, benchmark_signature, child_signature
from batchmark.operator.watched import (
    JOBS_INDEX,
    PODS_INDEX,
    WORKLOADS_INDEX,
    IndexedChildren,
    benchmark_job_of,
    job_entry,
    pod_entry,
    workload_entry,
)
from batchmark.operator.workers import ROUTINE, URGENT, PriorityWorkers, retried

BENCHMARK_LABELS = {"app.kubernetes.io/name": "batchmark", "app.kubernetes.io/component": "benchmark"}
RETRY_DELAY_SECONDS = 2.0
REFRESH_ATTEMPTS = 5  # a refresh the API server fails is tried again, 2, 4, 6 and 8 s later
WORKERS = 48  # threads for the synchronous handlers (kopf's executor): creation, cancel
REFRESH_WORKERS = 8  # threads for refreshes after an event
API_CONNECTIONS = WORKERS + REFRESH_WORKERS + CHILD_CREATORS  # one pooled connection to the API server per thread
# How often the positions of Queued benchmarks are read at most: one call per LocalQueue each time.
QUEUE_POSITION_SECONDS = 5.0
# Each benchmark whose position moved costs a refresh (a GET and a status patch), and when the head of a long
# queue is admitted every benchmark behind it moves: the polls are spaced so that these refreshes average at
# most this many per second (a queue of 200 sees its positions every 40 s), and run at most this many at once,
# so that the refreshes events ask for (admissions, finished pods) still find worker threads.
POSITION_REFRESHES_PER_SECOND = 5.0
POSITION_REFRESHES_AT_ONCE = 2

log = logging.getLogger(__name__)


def build_registry(reconciler: Reconciler) -> kopf.OperatorRegistry:
    """A registry of the operator's handlers, all bound to this reconciler."""
    registry = kopf.OperatorRegistry()

    def timed(action: Callable[[], Any]) -> None:
        started = time.perf_counter()
        outcome = "success"
        try:
            action()
        except (ApiException, HTTPError, OSError, ForeignChild) as error:
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

    refreshers: list[PriorityWorkers] = []  # this run's, made at startup
    waiting: dict[tuple[str, str], int] = {}  # benchmarks whose refresh waits for a thread: at which priority

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Progress in annotations: the status belongs to the schema (and its two writers), not to kopf.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.persistence.finalizer = f"{GROUP}/operator"
        settings.posting.level = 30  # only warnings and errors become events; transitions are posted by us
        settings.posting.reporting_component = "batchmark-operator"
        settings.execution.max_workers = WORKERS
        refreshers[:] = [PriorityWorkers(REFRESH_WORKERS, "refresh")]

    @kopf.on.cleanup(registry=registry)
    def stop_refreshers(**_: Any) -> None:
        for workers in refreshers:
            workers.shutdown()

    background: list[asyncio.Task[None]] = []

    async def follow_queue_positions() -> None:
        at_once = asyncio.Semaphore(POSITION_REFRESHES_AT_ONCE)

        async def refresh_moved(namespace: str, name: str) -> None:
            async with at_once:
                await refresh_soon(namespace, name)

        delay = QUEUE_POSITION_SECONDS
        while True:
            await asyncio.sleep(delay)
            try:
                moved = await asyncio.wrap_future(refreshers[0].submit(ROUTINE, reconciler.positions.poll))
                # Awaited before the next poll: the polls never outrun the refreshes they cause.
                outcomes = await asyncio.gather(
                    *(refresh_moved(namespace, name) for namespace, name in moved), return_exceptions=True
                )
            except Exception as error:  # never let one bad poll end the polling
                log.warning("polling queue positions failed: %s", error)
                continue
            for outcome in outcomes:
                if isinstance(outcome, Exception):
                    log.warning("refreshing a queued benchmark's position failed: %s", outcome)
            delay = max(QUEUE_POSITION_SECONDS, len(moved) / POSITION_REFRESHES_PER_SECOND)

    @kopf.on.startup(registry=registry)
    async def start_following_queue_positions(**_: Any) -> None:
        background.append(asyncio.create_task(follow_queue_positions()))

    @kopf.on.cleanup(registry=registry)
    async def stop_following_queue_positions(**_: Any) -> None:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        background.clear()

    def bind(indices: Mapping[str, Any]) -> None:
        """Point the reconciler at kopf's indices (every handler is handed them)."""
        reconciler.children = IndexedChildren(indices, reconciler.api_children)

    async def refresh_soon(namespace: str, name: str, priority: int = ROUTINE) -> None:
        """Refresh on a worker thread, unless a refresh of this benchmark at least as urgent waits already."""
        key = (namespace, name)
        if waiting.get(key, priority + 1) <= priority:
            return
        waiting[key] = priority

        def run() -> None:
            waiting.pop(key, None)  # from here on, a new event needs a refresh of its own
            timed(lambda: reconciler.refresh(namespace, name))

        try:
            # kopf never retries an event handler: a refresh the API server refused (429 under load, a dropped
            # connection) would leave the status stale until the benchmark's next event, and after its Job
            # finished there may be none.
            await retried(
                lambda: asyncio.wrap_future(refreshers[0].submit(priority, run)),
                REFRESH_ATTEMPTS,
                RETRY_DELAY_SECONDS,
                kopf.TemporaryError,
            )
        finally:
            if waiting.get(key) == priority:
                waiting.pop(key, None)

    @kopf.index("batch", "v1", "jobs", labels=BENCHMARK_LABELS, id=JOBS_INDEX, registry=registry)
    async def benchmark_jobs(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return job_entry(namespace, labels, body)

    @kopf.index("", "v1", "pods", labels=BENCHMARK_LABELS, id=PODS_INDEX, registry=registry)
    async def benchmark_pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return pod_entry(namespace, labels, body)

    @kopf.index(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloads", id=WORKLOADS_INDEX, registry=registry)
    async def job_workloads(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
        return workload_entry(namespace, labels, body)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(body: kopf.Body, **kwargs: Any) -> None:
        bind(kwargs)
        timed(lambda: reconciler.ensure(body))

    @kopf.on.field(GROUP, VERSION, PLURAL, field="spec.cancel", registry=registry)
    def cancel_changed(namespace: str | None, name: str, new: Any, **kwargs: Any) -> None:
        bind(kwargs)
        if new and namespace:
            timed(lambda: reconciler.cancel(namespace, name))

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def resource_changed(type: str, namespace: str | None, name: str, body: kopf.Body, **kwargs: Any) -> None:
        bind(kwargs)
        if not namespace:
            return
        if type == "DELETED":
            reconciler.forget(namespace, name)
        elif type == "ADDED" and not (body.get("status") or {}).get("phase"):
            # A new benchmark: its creation handler writes the first status. A refresh here too made one more
            # GET and PATCH per benchmark in a burst of creations, and waited on the same lock.
            return
        # Also on the initial listing (type None): a restarted operator restores its result gauges.
        elif reconciler.worth_refreshing(("benchmark", namespace, name), benchmark_signature(body)):
            await refresh_soon(namespace, name)

    def child_changed(kind: str) -> Callable[..., Any]:
        async def handler(
            type: str, namespace: str | None, name: str, labels: kopf.Labels, body: kopf.Body, **kwargs: Any
        ) -> None:
            bind(kwargs)
            benchmark = labels.get("batchmark.dev/benchmark")
            signature = None if type == "DELETED" else child_signature(kind, body)
            if benchmark and namespace and reconciler.worth_refreshing((kind, namespace, name), signature):
                await refresh_soon(namespace, benchmark, URGENT if kind == "Job" and finished(body) else ROUTINE)

        return handler

    def finished(job: kopf.Body) -> bool:
        view = JobView.from_dict(job)
        return view.complete or view.failed_reason is not None

    kopf.on.event("batch", "v1", "jobs", labels=BENCHMARK_LABELS, registry=registry)(child_changed("Job"))
    kopf.on.event("", "v1", "pods", labels=BENCHMARK_LABELS, registry=registry)(child_changed("Pod"))

    # Kueue's Workload of a queued benchmark's Job (Job name = benchmark name): admission, the reason it waits,
    # preemption. Served from when Kueue's CRDs exist (kopf follows the CRDs). Kueue rewrites a waiting
    # Workload's status often (each scheduling attempt): only what the status reads counts.
    @kopf.on.event(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, "workloads", registry=registry)
    async def workload_changed(
        type: str, namespace: str | None, name: str, meta: kopf.Meta, body: kopf.Body, **kwargs: Any
    ) -> None:
        bind(kwargs)
        job = benchmark_job_of(kwargs, namespace, meta) if namespace else None
        signature = None if type == "DELETED" else (kueue.WorkloadView.from_dict(body),)
        if job and namespace and reconciler.worth_refreshing(("Workload", namespace, name), signature):
            await refresh_soon(namespace, job)

    return registry
