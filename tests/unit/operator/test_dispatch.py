"""What kopf's handlers hand on (batchmark.operator.controller.dispatch), without a cluster: each event refreshes
only the benchmark it concerns, one waiting refresh per benchmark, a finished Job first, API failures retried, the
queue position poller spaced and bounded, every reconcile counted by outcome (the real API server:
tests/integration/operator)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from batchmark.operator.controller.dispatch import Dispatch, QueuePositionPoller, Refresher, RetryLater, timed
from batchmark.operator.controller.handlers import retried_by_kopf
from batchmark.operator.controller.kube import Kube, api_client
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.controller.status import JobView, StatusUpdate
from batchmark.operator.controller.watched import JOBS_INDEX, LOCAL_QUEUES_INDEX, PODS_INDEX, WORKLOADS_INDEX
from batchmark.operator.controller.workers import ROUTINE, URGENT, ControllerThreads, PriorityWorkers
from tests.unit.operator.test_api_client import write_kubeconfig


def reconciles(metrics: OperatorMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value("batchmark_operator_reconciles_total", {"outcome": outcome})
    return value or 0.0


# --- the metrics wrapper ------------------------------------------------------------------------------------


def test_every_reconcile_is_counted_by_outcome_and_an_api_failure_is_kopfs_to_retry() -> None:
    metrics = OperatorMetrics()
    timed(metrics, lambda: None)
    with pytest.raises(kopf.TemporaryError, match="API server") as retried, retried_by_kopf():
        timed(metrics, lambda: (_ for _ in ()).throw(ApiException(status=429, reason="Too Many Requests")))
    assert retried.value.delay == 2.0
    assert isinstance(retried.value.__cause__, ApiException)
    with pytest.raises(RetryLater):
        timed(metrics, lambda: (_ for _ in ()).throw(ConnectionResetError("dropped")))
    with pytest.raises(ValueError, match="a bug"):
        timed(metrics, lambda: (_ for _ in ()).throw(ValueError("a bug")))
    assert (reconciles(metrics, "success"), reconciles(metrics, "retry"), reconciles(metrics, "error")) == (1, 2, 1)
    count = metrics.registry.get_sample_value(
        "batchmark_operator_reconcile_duration_seconds_count", {"outcome": "retry"}
    )
    assert count == 2


# --- the refresher: de-duplication, priorities, retries --------------------------------------------------------


class Held:
    """Refreshes that record their order; the first one holds the only worker thread until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.release = threading.Event()
        self.started = threading.Event()

    def refresh(self, namespace: str, name: str) -> None:
        if not self.started.is_set():
            self.started.set()
            self.release.wait(10)
        self.calls.append((namespace, name))


async def wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


def test_a_benchmark_waits_for_at_most_one_refresh_and_a_finished_job_goes_first() -> None:
    held = Held()
    workers = PriorityWorkers(1, "test")
    refresher = Refresher(held.refresh, OperatorMetrics(), workers)

    async def scenario() -> None:
        blocker = asyncio.ensure_future(refresher.soon("ns", "first"))
        await wait_for(held.started.is_set)
        routine = [asyncio.ensure_future(refresher.soon("ns", name)) for name in ("a", "b", "a", "a")]
        await wait_for(lambda: refresher.waiting("ns", "b") == ROUTINE)
        # "a" already waits: its second and third events add nothing (the waiting refresh reads their state too).
        assert refresher.waiting("ns", "a") == ROUTINE
        urgent = asyncio.ensure_future(refresher.soon("ns", "c", URGENT))
        await wait_for(lambda: refresher.waiting("ns", "c") == URGENT)
        held.release.set()
        await asyncio.gather(blocker, *routine, urgent)

    try:
        asyncio.run(scenario())
    finally:
        workers.shutdown()
    assert held.calls == [("ns", "first"), ("ns", "c"), ("ns", "a"), ("ns", "b")]
    assert refresher.waiting("ns", "a") is None


def test_an_event_during_a_refresh_asks_for_one_more() -> None:
    held = Held()
    workers = PriorityWorkers(1, "test")
    refresher = Refresher(held.refresh, OperatorMetrics(), workers)

    async def scenario() -> None:
        running = asyncio.ensure_future(refresher.soon("ns", "a"))
        await wait_for(held.started.is_set)  # running: no longer waiting, so a new event needs its own refresh
        assert refresher.waiting("ns", "a") is None
        again = asyncio.ensure_future(refresher.soon("ns", "a"))
        await wait_for(lambda: refresher.waiting("ns", "a") == ROUTINE)
        held.release.set()
        await asyncio.gather(running, again)

    try:
        asyncio.run(scenario())
    finally:
        workers.shutdown()
    assert held.calls == [("ns", "a"), ("ns", "a")]


def test_a_refresh_the_api_server_refused_is_tried_again_then_given_up() -> None:
    metrics = OperatorMetrics()
    workers = PriorityWorkers(1, "test")
    failures = {"flaky": 2, "down": 99}
    calls: list[str] = []

    def refresh(namespace: str, name: str) -> None:
        calls.append(name)
        if failures[name] > 0:
            failures[name] -= 1
            raise ApiException(status=503, reason="Service Unavailable")

    refresher = Refresher(refresh, metrics, workers, attempts=3, retry_delay=0.01)
    try:
        asyncio.run(refresher.soon("ns", "flaky"))
        with pytest.raises(RetryLater):
            asyncio.run(refresher.soon("ns", "down"))
    finally:
        workers.shutdown()
    assert calls == ["flaky"] * 3 + ["down"] * 3
    assert (reconciles(metrics, "success"), reconciles(metrics, "retry")) == (1, 5)
    assert refresher.waiting("ns", "down") is None


# --- the queue position poller ---------------------------------------------------------------------------------


def test_the_poller_spaces_its_polls_by_the_refreshes_they_cause_and_runs_few_at_once() -> None:
    workers = PriorityWorkers(2, "test")
    moved = [("ns", f"queued-{index}") for index in range(20)]
    running = 0
    most = 0
    refreshed: list[str] = []

    async def refresh(namespace: str, name: str) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1
        refreshed.append(name)
        if name == "queued-3":
            raise RuntimeError("the API server refused")  # logged; the others still go

    async def scenario() -> tuple[float | None, float | None]:
        poller = QueuePositionPoller(lambda: moved, workers, refresh, interval=1.0, refreshes_per_second=5.0)
        busy = await poller.poll_once()
        moved[:] = moved[:2]
        quiet = await poller.poll_once()
        return busy, quiet

    try:
        busy, quiet = asyncio.run(scenario())
    finally:
        workers.shutdown()
    assert busy == 20 / 5.0  # 20 refreshes at 5 per second: the next poll waits 4 s
    assert quiet == 1.0  # never sooner than the interval
    assert most == 2
    assert len(refreshed) == 22


def test_a_poll_that_fails_is_logged_and_the_polling_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    workers = PriorityWorkers(1, "test")

    def poll() -> list[tuple[str, str]]:
        raise ApiException(status=403, reason="Forbidden")

    async def refresh(namespace: str, name: str) -> None:
        raise AssertionError("nothing moved")

    try:
        assert asyncio.run(QueuePositionPoller(poll, workers, refresh).poll_once()) is None
    finally:
        workers.shutdown()
    assert "polling queue positions failed" in caplog.text


# --- the routing of events -------------------------------------------------------------------------------------


class RecordingReconciler(Reconciler):
    """The real Reconciler (its forgetting, its metrics), with its API calls recorded instead."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(Kube(api_client(str(kubeconfig))), ControllerThreads(refresh_threads=1))
        self.refreshed: list[tuple[str, str]] = []
        self.ensured: list[str] = []
        self.cancelled: list[str] = []
        self.forgotten: list[str] = []

    def refresh(self, namespace: str, name: str, *_: Any, **__: Any) -> StatusUpdate | None:
        self.refreshed.append((namespace, name))
        return None

    def ensure(self, body: Mapping[str, Any]) -> None:
        self.ensured.append(body["metadata"]["name"])

    def cancel(self, namespace: str, name: str) -> None:
        self.cancelled.append(name)

    def forget(self, namespace: str, name: str) -> None:
        super().forget(namespace, name)
        self.forgotten.append(name)


def benchmark(name: str, phase: str | None = "Running", generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "generation": generation},
        "spec": {},
        "status": {"phase": phase} if phase else {},
    }


def job(name: str, complete: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return {"metadata": {"namespace": "ns", "name": name}, "status": {"conditions": conditions}}


# kopf's indices, by name, as its startup handler is handed them: none of the benchmarks' Jobs, pods, Workloads.
NO_INDICES: dict[str, Any] = {JOBS_INDEX: {}, PODS_INDEX: {}, WORKLOADS_INDEX: {}, LOCAL_QUEUES_INDEX: {}}


def routed(
    tmp_path: Path, events: Callable[[Dispatch], Any], indices: Mapping[str, Any] = NO_INDICES
) -> RecordingReconciler:
    reconciler = RecordingReconciler(write_kubeconfig(tmp_path / "kubeconfig"))
    dispatch = Dispatch(reconciler, reconciler.threads)

    async def scenario() -> None:
        dispatch.start(indices)
        try:
            await events(dispatch)
        finally:
            await dispatch.stop()

    asyncio.run(scenario())
    return reconciler


def test_a_benchmarks_own_events_refresh_it_only_when_something_the_status_reads_changed(tmp_path: Path) -> None:
    async def events(dispatch: Dispatch) -> None:
        await dispatch.benchmark_event("ADDED", "ns", "new", benchmark("new", phase=None))  # its creation writes it
        await dispatch.benchmark_event(None, "ns", "listed", benchmark("listed"))  # a restart: restore its gauges
        await dispatch.benchmark_event("MODIFIED", "ns", "listed", benchmark("listed"))  # a progress tick: nothing
        await dispatch.benchmark_event("MODIFIED", "ns", "listed", benchmark("listed", generation=2))
        await dispatch.benchmark_event("DELETED", "ns", "listed", benchmark("listed"))
        await dispatch.benchmark_event("MODIFIED", None, "cluster-scoped", benchmark("cluster-scoped"))

    reconciler = routed(tmp_path, events)
    assert reconciler.refreshed == [("ns", "listed"), ("ns", "listed")]
    assert reconciler.forgotten == ["listed"]


def test_a_childs_event_refreshes_its_benchmark(tmp_path: Path) -> None:
    labels = {"batchmark.dev/benchmark": "bench"}
    # kopf's indices, bound once when the dispatch starts: the benchmark Job `bench` (uid job-1); Workloads of
    # other Jobs are other teams'.
    ours = JobView(name="bench", created="2026-01-01T00:00:00Z", uid="job-1")
    indices = {JOBS_INDEX: {("ns", "bench"): [ours]}, PODS_INDEX: {}, WORKLOADS_INDEX: {}, LOCAL_QUEUES_INDEX: {}}

    async def events(dispatch: Dispatch) -> None:
        await dispatch.child_event("Job", "ADDED", "ns", "bench", labels, job("bench"))
        await dispatch.child_event("Job", "MODIFIED", "ns", "bench", labels, job("bench"))  # nothing changed
        await dispatch.child_event("Job", "MODIFIED", "ns", "bench", labels, job("bench", complete=True))
        await dispatch.child_event("Pod", "ADDED", "ns", "bench-x1", {}, {"metadata": {"name": "bench-x1"}})

        def owned_by(name: str, uid: str) -> dict[str, Any]:
            return {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}]}

        owned = owned_by("bench", "job-1")
        await dispatch.workload_event("ADDED", "ns", "job-bench-1", owned, {"metadata": owned})
        await dispatch.workload_event("ADDED", "ns", "stranger", {}, {"metadata": {}})
        for foreign in (owned_by("training", "job-9"), owned_by("bench", "job-9")):  # another team's, a namesake
            await dispatch.workload_event("ADDED", "ns", "job-other", foreign, {"metadata": foreign})

    reconciler = routed(tmp_path, events, indices)
    assert reconciler.refreshed == [("ns", "bench")] * 3


def test_creation_and_cancel_are_timed_reconciles(tmp_path: Path) -> None:
    async def events(dispatch: Dispatch) -> None:
        dispatch.ensure(benchmark("bench"))
        dispatch.cancel_changed("ns", "bench", True)
        dispatch.cancel_changed("ns", "bench", False)  # cancel unset: nothing to stop

    reconciler = routed(tmp_path, events)
    assert (reconciler.ensured, reconciler.cancelled) == (["bench"], ["bench"])
    assert reconciles(reconciler.metrics, "success") == 2


def test_a_finished_job_is_refreshed_before_routine_events(tmp_path: Path) -> None:
    assert URGENT < ROUTINE
    reconciler = RecordingReconciler(write_kubeconfig(tmp_path / "kubeconfig"))
    gate = threading.Event()
    started = threading.Event()
    order: list[str] = []

    def refresh(namespace: str, name: str, **_: Any) -> None:
        if name == "blocker":
            started.set()
            gate.wait(10)
        order.append(name)

    reconciler.refresh = refresh  # type: ignore[method-assign]
    dispatch = Dispatch(reconciler, reconciler.threads)
    labels = {"batchmark.dev/benchmark": "done"}

    async def scenario() -> None:
        dispatch.start(NO_INDICES)
        try:
            blocker = asyncio.ensure_future(dispatch.benchmark_event(None, "ns", "blocker", benchmark("blocker")))
            await wait_for(started.is_set)  # it holds the only refresh thread
            routine = asyncio.ensure_future(dispatch.benchmark_event(None, "ns", "routine", benchmark("routine")))
            await wait_for(lambda: dispatch.refresher.waiting("ns", "routine") == ROUTINE)
            finished = asyncio.ensure_future(
                dispatch.child_event("Job", "MODIFIED", "ns", "done", labels, job("done", complete=True))
            )
            await wait_for(lambda: dispatch.refresher.waiting("ns", "done") == URGENT)
            gate.set()
            await asyncio.gather(blocker, routine, finished)
        finally:
            await dispatch.stop()

    asyncio.run(scenario())
    assert order == ["blocker", "done", "routine"]
