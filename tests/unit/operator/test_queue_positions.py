"""Queue positions from Kueue's visibility API: read once per LocalQueue per poll, written into the status and
the Queued message, and, where the API is absent or refuses, left out without failing or filling the log
(the real Kueue: tests/integration/operator/test_kueue_queueing.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import NewConnectionError

from batchmark.operator.controller.kube import Kube
from batchmark.operator.controller.kueue import WorkloadView
from batchmark.operator.controller.positions import QueuePosition, QueuePositions, positions_in
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.controller.status import JobView, Observation, PodView, build_status
from batchmark.operator.controller.workers import ControllerThreads
from batchmark.operator.resource.status import Phase

QUOTA_MESSAGE = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpus"


def summary(*entries: tuple[str, int, int]) -> dict[str, Any]:
    """A PendingWorkloadsSummary as Kueue's visibility API answers (v1beta2)."""
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-12-03T10:00:00Z"},
                "priority": 0,
                "localQueueName": "gpus",
                "positionInClusterQueue": in_cluster_queue,
                "positionInLocalQueue": in_local_queue,
            }
            for name, in_local_queue, in_cluster_queue in entries
        ],
    }


class FakeVisibility:
    """The visibility API: answers per LocalQueue, or an error, counting the calls."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Mapping[str, Any] | Exception] = {}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, namespace: str, local_queue: str) -> Mapping[str, Any]:
        self.calls.append((namespace, local_queue))
        answer = self.answers[(namespace, local_queue)]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def not_found() -> ApiException:
    return ApiException(status=404, reason="Not Found")


def test_a_summary_gives_each_workloads_positions() -> None:
    found = positions_in(summary(("job-a-1", 0, 2), ("job-b-2", 1, 3)), "gpus")
    assert found == {
        "job-a-1": QueuePosition("gpus", position=0, cluster_queue_position=2),
        "job-b-2": QueuePosition("gpus", position=1, cluster_queue_position=3),
    }
    assert found["job-b-2"].status() == {"name": "gpus", "position": 1, "clusterQueuePosition": 3}


def test_one_call_per_local_queue_per_poll_and_only_moved_benchmarks_are_named() -> None:
    fetch = FakeVisibility()
    positions = QueuePositions(fetch)
    fetch.answers[("team-a", "gpus")] = summary(*((f"job-{index}", index, index) for index in range(50)))
    fetch.answers[("team-b", "gpus")] = summary(("job-x", 0, 50))
    # Before the first poll nothing is known: the benchmarks are followed, without a position.
    for index in range(50):
        assert positions.position("team-a", f"bench-{index}", "gpus", f"job-{index}") is None
    assert positions.position("team-b", "bench-x", "gpus", "job-x") is None
    assert fetch.calls == []

    moved = positions.poll()
    assert sorted(fetch.calls) == [("team-a", "gpus"), ("team-b", "gpus")]
    assert len(moved) == 51
    # Each refresh reads the polled answer, and calls nothing.
    for index in range(50):
        assert positions.position("team-a", f"bench-{index}", "gpus", f"job-{index}") == QueuePosition(
            "gpus", index, index
        )
    assert positions.position("team-b", "bench-x", "gpus", "job-x") == QueuePosition("gpus", 0, 50)
    assert len(fetch.calls) == 2

    # Nothing moved: nothing to refresh.
    assert positions.poll() == []
    # The head of team A's queue was admitted: everyone behind it moves up one.
    positions.forget("team-a", "bench-0")
    fetch.answers[("team-a", "gpus")] = summary(*((f"job-{index}", index - 1, index - 1) for index in range(1, 50)))
    moved = positions.poll()
    assert sorted(moved) == sorted(("team-a", f"bench-{index}") for index in range(1, 50))
    assert positions.position("team-a", "bench-1", "gpus", "job-1") == QueuePosition("gpus", 0, 0)


def test_a_local_queue_nobody_waits_in_is_not_read() -> None:
    fetch = FakeVisibility()
    positions = QueuePositions(fetch)
    fetch.answers[("team-a", "gpus")] = summary(("job-1", 0, 0))
    positions.position("team-a", "bench-1", "gpus", "job-1")
    positions.poll()
    positions.forget("team-a", "bench-1")
    assert positions.poll() == []
    assert fetch.calls == [("team-a", "gpus")]
    assert positions.following == 0


@pytest.mark.parametrize(
    "error",
    [
        not_found(),  # no APIService for visibility.kueue.x-k8s.io: a cluster whose Kueue serves none
        ApiException(status=503, reason="Service Unavailable"),  # registered, but its server is down
        ApiException(status=403, reason="Forbidden"),  # no RBAC for it
        NewConnectionError(None, "Connection refused"),  # type: ignore[arg-type]
    ],
)
def test_without_the_visibility_api_benchmarks_wait_without_a_position_and_it_is_logged_once(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    fetch, clock = FakeVisibility(), Clock()
    positions = QueuePositions(fetch, retry_seconds=30, clock=clock)
    fetch.answers[("team-a", "gpus")] = error
    positions.position("team-a", "bench-1", "gpus", "job-1")
    positions.position("team-a", "bench-2", "gpus", "job-2")
    with caplog.at_level(logging.INFO, logger="batchmark.operator.controller.positions"):
        for _ in range(10):  # polls every few seconds for 20 s
            assert positions.poll() == []
            clock.now += 2
        assert fetch.calls == [("team-a", "gpus")]  # asked once, not again before retry_seconds
        assert positions.position("team-a", "bench-1", "gpus", "job-1") is None
        clock.now += 10
        assert positions.poll() == []
        assert len(fetch.calls) == 2  # asked again after 30 s
        warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 1, caplog.text
        assert "team-a/gpus" in warnings[0].getMessage()

        # The API comes (back): positions appear, and that is said once.
        fetch.answers[("team-a", "gpus")] = summary(("job-1", 0, 0), ("job-2", 1, 1))
        clock.now += 30
        assert sorted(positions.poll()) == [("team-a", "bench-1"), ("team-a", "bench-2")]
    assert any("available again" in record.getMessage() for record in caplog.records)


def test_positions_that_can_no_longer_be_read_are_taken_back() -> None:
    fetch = FakeVisibility()
    positions = QueuePositions(fetch)
    fetch.answers[("team-a", "gpus")] = summary(("job-1", 3, 4))
    positions.position("team-a", "bench-1", "gpus", "job-1")
    positions.poll()
    assert positions.position("team-a", "bench-1", "gpus", "job-1") == QueuePosition("gpus", 3, 4)
    fetch.answers[("team-a", "gpus")] = ApiException(status=503, reason="Service Unavailable")
    assert positions.poll() == [("team-a", "bench-1")]  # refreshed, to clear what its status shows
    assert positions.position("team-a", "bench-1", "gpus", "job-1") is None


# --- the status ---------------------------------------------------------------------------------------------


def waiting_workload() -> WorkloadView:
    return WorkloadView(name="job-sweep-1", reason="Pending", message=QUOTA_MESSAGE)


def job_view(suspended: bool = True) -> JobView:
    return JobView(name="sweep", created="2026-12-03T09:59:00Z", suspended=suspended, queue_name="gpus", uid="u1")


def status_with(position: QueuePosition | None, workload: WorkloadView, suspended: bool = True) -> dict[str, Any]:
    observation = Observation(
        generation=1,
        cancel=False,
        status={"phase": "Queued"},
        job=job_view(suspended),
        queued=True,
        workload=workload,
        position=position,
    )
    return build_status(observation, timestamp="2026-12-03T10:01:00Z").fields


def admitted_condition(fields: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(entry for entry in fields["conditions"] if entry["type"] == "Admitted")
    return found


def test_a_queued_benchmark_shows_its_position_in_the_status_and_the_messages() -> None:
    fields = status_with(QueuePosition("gpus", 2, 5), waiting_workload())
    assert fields["phase"] == Phase.QUEUED
    assert fields["queue"] == {"name": "gpus", "position": 2, "clusterQueuePosition": 5}
    expected = f"position 2 in LocalQueue gpus, 5 in its ClusterQueue (0: next to be admitted); {QUOTA_MESSAGE}"
    assert fields["message"] == expected
    assert admitted_condition(fields)["message"] == expected
    assert admitted_condition(fields)["status"] == "False"


def test_without_a_position_the_message_is_kueues_and_no_queue_is_shown() -> None:
    fields = status_with(None, waiting_workload())
    assert fields["phase"] == Phase.QUEUED
    assert fields["queue"] is None  # a merge patch's null: nothing stored, or a stale one removed
    assert fields["message"] == QUOTA_MESSAGE


def test_an_admitted_benchmark_shows_no_position() -> None:
    admitted = WorkloadView(name="job-sweep-1", admitted=True, admitted_message="The workload is admitted")
    assert status_with(QueuePosition("gpus", 0, 0), admitted)["queue"] is None
    assert status_with(QueuePosition("gpus", 0, 0), admitted, suspended=False)["queue"] is None


# --- the reconciler, with the visibility API absent or present -----------------------------------------------


class FakeKube(Kube):
    """The benchmark, and the status patches the reconciler sends; no API server."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient())
        self.status: dict[str, Any] = {"phase": "Queued"}
        self.patches: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []

    def get_benchmark(self, namespace: str, name: str) -> dict[str, Any] | None:
        metadata = {"name": name, "namespace": namespace, "uid": "b1", "generation": 1}
        return {"metadata": metadata, "spec": {"queueName": "gpus"}, "status": dict(self.status)}

    def patch_status(self, namespace: str, name: str, fields: Mapping[str, Any]) -> None:
        self.patches.append(dict(fields))
        self.status = {key: value for key, value in {**self.status, **fields}.items() if value is not None}

    def event(self, benchmark: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason))


class QueuedChildren:
    """A suspended queued Job and its waiting Workload."""

    def __init__(self) -> None:
        self.current = waiting_workload()

    def job(self, namespace: str, name: str, owner_uid: str) -> JobView | None:
        return job_view()

    def pods(self, namespace: str, name: str) -> list[PodView]:
        return []

    def workload(self, namespace: str, job_uid: str) -> WorkloadView | None:
        return self.current

    def is_benchmark_job(self, namespace: str, name: str, uid: str) -> bool:
        return True

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return True


def reconciler_with(fetch: FakeVisibility) -> tuple[Reconciler, FakeKube]:
    kube = FakeKube()
    reconciler = Reconciler(kube, ControllerThreads())
    reconciler.children = QueuedChildren()
    reconciler.positions = QueuePositions(fetch)
    return reconciler, kube


def test_the_operator_carries_on_without_the_visibility_api(caplog: pytest.LogCaptureFixture) -> None:
    fetch = FakeVisibility()
    fetch.answers[("team-a", "gpus")] = not_found()
    reconciler, kube = reconciler_with(fetch)
    with caplog.at_level(logging.WARNING):
        update = reconciler.refresh("team-a", "sweep")
        assert reconciler.positions.poll() == []
        for _ in range(5):
            reconciler.refresh("team-a", "sweep")
            reconciler.positions.poll()
    assert update is not None
    assert update.phase == Phase.QUEUED
    assert "queue" not in kube.status
    assert kube.status["message"] == QUOTA_MESSAGE
    assert len(fetch.calls) == 1
    assert len([record for record in caplog.records if record.levelno >= logging.WARNING]) == 1


def test_the_operator_writes_the_polled_position_and_clears_it_on_admission() -> None:
    fetch = FakeVisibility()
    fetch.answers[("team-a", "gpus")] = summary(("job-other", 0, 0), ("job-sweep-1", 1, 1))
    reconciler, kube = reconciler_with(fetch)
    reconciler.refresh("team-a", "sweep")
    assert "queue" not in kube.status  # not polled yet
    assert reconciler.positions.poll() == [("team-a", "sweep")]
    reconciler.refresh("team-a", "sweep")
    assert kube.status["queue"] == {"name": "gpus", "position": 1, "clusterQueuePosition": 1}
    assert kube.status["message"].startswith("position 1 in LocalQueue gpus")

    # Kueue admits it: the position goes from the status, and the benchmark is no longer followed.
    children = reconciler.children
    assert isinstance(children, QueuedChildren)
    children.current = WorkloadView(name="job-sweep-1", admitted=True)
    reconciler.refresh("team-a", "sweep")
    assert "queue" not in kube.status
    assert kube.patches[-1]["queue"] is None
    assert reconciler.positions.following == 0
