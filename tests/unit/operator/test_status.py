"""The phase and conditions of a BatchBenchmark, decided from its Job and pods (pure functions)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from batchmark.operator.controller.status import JobView, Observation, PodView, build_status
from batchmark.operator.resource.status import ConditionType, Phase, Reason

T0 = "2026-01-01T00:00:00Z"


def job(**status: Any) -> JobView:
    conditions = []
    if status.pop("complete", False):
        conditions.append({"type": "Complete", "status": "True", "lastTransitionTime": T0})
    failed = status.pop("failed_reason", None)
    if failed:
        conditions.append({"type": "Failed", "status": "True", "reason": failed, "message": "job said so"})
    suspend = status.pop("suspend", False)
    return JobView.from_dict(
        {
            "metadata": {"name": "bb", "creationTimestamp": T0},
            "spec": {"suspend": suspend},
            "status": {**status, "conditions": conditions},
        }
    )


def pod(phase: str = "Pending", node: str | None = None, name: str = "bb-1", **extra: Any) -> PodView:
    status: dict[str, Any] = {"phase": phase, "conditions": extra.pop("conditions", [])}
    if "terminated" in extra:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": extra.pop("terminated")}}]
    if "waiting" in extra:
        status["containerStatuses"] = [{"name": "runner", "state": {"waiting": extra.pop("waiting")}}]
    spec = {"nodeName": node} if node else {}
    return PodView.from_dict(
        {"metadata": {"name": name, "creationTimestamp": extra.pop("created", T0)}, "spec": spec, "status": status}
    )


def observe(job_view: JobView | None, pods: list[PodView], cancel: bool = False, **status: Any) -> Observation:
    return Observation(generation=1, cancel=cancel, status=status, job=job_view, pods=pods)


def conditions(update_fields: dict[str, Any]) -> dict[str, str]:
    return {condition["type"]: condition["status"] for condition in update_fields["conditions"]}


def test_the_lifecycle_pending_scheduling_loading_running_succeeded() -> None:
    assert build_status(observe(None, [])).phase == Phase.PENDING
    assert build_status(observe(job(active=1), [])).phase == Phase.SCHEDULING
    loading = build_status(observe(job(active=1), [pod("Running", node="gpu-node-0")]))
    assert loading.phase == Phase.LOADING_ENGINE
    assert conditions(loading.fields)["Scheduled"] == "True"
    assert conditions(loading.fields)["EngineLoaded"] == "False"
    running = build_status(
        observe(job(active=1), [pod("Running", node="gpu-node-0")], progress={"podName": "bb-1"}, phase="LoadingEngine")
    )
    assert running.phase == Phase.RUNNING
    assert running.changed_phase
    assert conditions(running.fields)["EngineLoaded"] == "True"
    done = build_status(
        observe(job(succeeded=1, complete=True), [pod("Succeeded", node="gpu-node-0")], phase="Running")
    )
    assert done.phase == Phase.SUCCEEDED
    assert conditions(done.fields) == {
        "Scheduled": "True",
        "EngineLoaded": "True",
        "Complete": "True",
        "Failed": "False",
        "Retrying": "False",
    }
    assert done.fields["attempts"] == 1
    assert done.fields["completionTime"]


def test_unschedulable_carries_the_schedulers_message() -> None:
    message = "0/3 nodes are available: 2 Insufficient nvidia.com/gpu."
    waiting = pod(
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
    )
    update = build_status(observe(job(active=1), [waiting]))
    assert (update.phase, update.reason, update.message) == (Phase.SCHEDULING, Reason.UNSCHEDULABLE, message)
    assert update.warning
    assert conditions(update.fields)["Scheduled"] == "False"


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("ErrImagePull", 'rpc error: code = Unavailable desc = failed to pull and unpack image "r.invalid/x:1": ...'),
        ("ImagePullBackOff", 'Back-off pulling image "r.invalid/x:1": ErrImagePull: rpc error: ...'),
        ("ErrImageNeverPull", 'Container image "r.invalid/x:1" is not present with pull policy of Never'),
    ],
)
def test_an_image_the_node_cannot_get_waits_in_scheduling_with_a_warning(reason: str, message: str) -> None:
    waiting = pod("Pending", node="gpu-node-0", waiting={"reason": reason, "message": message})
    # On its node, its container not started: Scheduling before the pull fails too, never LoadingEngine.
    starting = build_status(observe(job(active=1), [pod("Pending", node="gpu-node-0")], phase="Scheduling"))
    assert (starting.phase, starting.reason) == (Phase.SCHEDULING, Reason.STARTING)
    update = build_status(observe(job(active=1), [waiting], phase="Scheduling", reason="Starting"))
    assert (update.phase, update.reason, update.message) == (Phase.SCHEDULING, reason, message)
    assert update.warning
    assert conditions(update.fields) == {
        "Scheduled": "True",
        "EngineLoaded": "False",
        "Complete": "False",
        "Failed": "False",
        "Retrying": "False",
    }


@pytest.mark.parametrize(
    ("terminated", "job_reason", "reason"),
    [
        ({"exitCode": 137, "reason": "OOMKilled"}, "BackoffLimitExceeded", "OOMKilled"),
        (
            {"exitCode": 2, "reason": "Error", "message": "batchmark run: error: --backend: model: bad"},
            "BackoffLimitExceeded",
            "InvalidConfig",
        ),
        (
            {"exitCode": 1, "reason": "Error", "message": "log\nbatchmark run: the engine failed: CUDA OOM"},
            "BackoffLimitExceeded",
            "EngineError",
        ),
        ({"exitCode": 1, "reason": "Error"}, "BackoffLimitExceeded", "BackoffLimitExceeded"),
        (None, "DeadlineExceeded", "DeadlineExceeded"),
    ],
)
def test_failures_name_their_reason(terminated: dict[str, Any] | None, job_reason: str, reason: str) -> None:
    pods = [pod("Failed", node="gpu-node-0", terminated=terminated)] if terminated else []
    update = build_status(observe(job(failed=1, failed_reason=job_reason), pods, phase="Running"))
    assert (update.phase, update.reason) == (Phase.FAILED, reason)
    assert conditions(update.fields)["Failed"] == "True"
    if reason == "EngineError":
        assert "CUDA OOM" in update.message


def test_a_run_whose_store_failed_ends_failed_saying_so_with_its_results_kept() -> None:
    """Exit 4: the run ended, its results are in the status, but the results store could not keep them; the
    Job's pod failure policy ends the Job at once (PodFailurePolicy), and the reason is the runner's."""
    said = {
        "runId": "r1",
        "complete": True,
        "results": [],
        "outputFailure": "--store: s3://runs/nightly: could not store the run: connection refused",
    }
    ended = pod("Failed", node="gpu-node-0", terminated={"exitCode": 4, "reason": "Error", "message": json.dumps(said)})
    results = [{"strategy": "throughput", "outputTokensPerSecond": 100.0}]
    update = build_status(
        observe(job(failed=1, failed_reason="PodFailurePolicy"), [ended], phase="Running", results=results)
    )
    assert (update.phase, update.reason) == (Phase.FAILED, Reason.OUTPUT_FAILED)
    assert update.message == (
        "the run ended and its results are in the status, but --store: s3://runs/nightly: could not store the run:"
        " connection refused"
    )
    assert update.warning
    assert conditions(update.fields)["Failed"] == "True"
    # A runner that said nothing more (an older image): still the reason, with no words of its own.
    quiet = pod("Failed", node="gpu-node-0", terminated={"exitCode": 4, "reason": "Error"})
    update = build_status(observe(job(failed=1, failed_reason="PodFailurePolicy"), [quiet], phase="Running"))
    assert (update.reason, update.message) == (
        Reason.OUTPUT_FAILED,
        "the run ended and its results are in the status, but an output could not be written",
    )


@pytest.mark.parametrize(("exit_code", "reason"), [(4, Reason.OUTPUT_FAILED), (2, Reason.INVALID_CONFIG)])
def test_an_exit_the_job_is_not_retried_on_ends_the_benchmark_before_the_job_says_so(
    exit_code: int, reason: str
) -> None:
    """The Job's pod failure policy fails it on exits 2 and 4: between the pod's end and the Job's FailureTarget and
    Failed conditions, the benchmark is not said to retry."""
    ended = pod("Failed", node="gpu-node-0", terminated={"exitCode": exit_code, "reason": "Error"})
    update = build_status(observe(job(failed=1), [ended], phase="Running", attempts=1))
    assert (update.phase, update.reason) == (Phase.FAILED, reason)
    assert conditions(update.fields)["Retrying"] == "False"
    assert update.fields["attempts"] == 1


def test_a_retry_keeps_the_phase_and_counts_attempts() -> None:
    """Phases never go back: a retry's pod waiting for a node is said in the reason, not by Scheduling again."""
    first = pod("Failed", node="gpu-node-0", name="bb-a", created="2026-01-01T00:00:00Z", terminated={"exitCode": 137})
    between = build_status(observe(job(failed=1), [first], phase="Running", attempts=1))
    assert (between.phase, between.reason) == (Phase.RUNNING, Reason.RETRYING)
    second = pod("Pending", name="bb-b", created="2026-01-01T00:00:05Z")
    update = build_status(observe(job(active=1, failed=1), [first, second], phase="Running", attempts=1))
    assert (update.phase, update.reason) == (Phase.RUNNING, Reason.RETRYING)
    assert "waiting for a node" in update.message
    assert update.fields["attempts"] == 2
    assert update.fields["podName"] == "bb-b"


def test_a_finished_pod_is_no_reason_to_go_back_to_scheduling() -> None:
    """The sweep example showed Running, then Scheduling between its pod's end and the Job's completion."""
    done = pod("Succeeded", node="gpu-node-0", terminated={"exitCode": 0})
    update = build_status(observe(job(succeeded=1), [done], phase="Running"))
    assert update.phase == Phase.RUNNING
    assert not update.changed_phase


def test_cancel_waits_for_the_pod_then_is_cancelled() -> None:
    alive = build_status(observe(job(active=1, suspend=True), [pod("Running", node="n")], cancel=True, phase="Running"))
    assert alive.reason == "Cancelling"
    gone = build_status(observe(job(suspend=True), [], cancel=True, phase="Running"))
    assert gone.phase == Phase.CANCELLED
    assert build_status(observe(None, [], cancel=True)).phase == Phase.CANCELLED


def test_finished_phases_never_change() -> None:
    update = build_status(observe(job(active=1), [pod()], phase="Succeeded", reason="Completed", message="done"))
    assert update.phase == Phase.SUCCEEDED
    assert not update.changed_phase


def test_invalid_config_fails_before_any_job() -> None:
    observation = Observation(generation=1, cancel=False, status={}, job=None, invalid="spec.backend: bad")
    update = build_status(observation)
    assert (update.phase, update.reason, update.message) == (Phase.FAILED, Reason.INVALID_CONFIG, "spec.backend: bad")


def test_condition_times_stay_while_their_status_stays() -> None:
    first = build_status(observe(job(active=1), [pod("Running", node="n")]), timestamp="2026-01-01T00:00:01Z")
    again = build_status(
        observe(job(active=1), [pod("Running", node="n")], **first.fields), timestamp="2026-01-01T00:09:00Z"
    )
    assert again.fields["conditions"] == first.fields["conditions"]


def test_an_engine_error_reads_the_runners_stop_reason_not_its_summary_json() -> None:
    summary = {
        "runId": "r1",
        "complete": False,
        "stopReason": "the engine failed: CUDA out of memory",
        "results": [{"strategy": "synchronous", "stopReason": "the engine failed: CUDA out of memory"}],
    }
    failed = pod(
        "Failed", node="gpu-node-0", terminated={"exitCode": 1, "reason": "Error", "message": json.dumps(summary)}
    )
    update = build_status(observe(job(failed=1, failed_reason="BackoffLimitExceeded"), [failed], phase="Running"))
    assert (update.phase, update.reason) == (Phase.FAILED, Reason.ENGINE_ERROR)
    assert update.message == "the engine failed: CUDA out of memory (the results of 1 benchmark(s) are kept)"
    # A run that failed before any benchmark: the run's own stop reason alone.
    summary |= {"results": [], "stopReason": "the engine failed to load: no GPU"}
    failed = pod(
        "Failed", node="gpu-node-0", terminated={"exitCode": 1, "reason": "Error", "message": json.dumps(summary)}
    )
    update = build_status(observe(job(failed=1, failed_reason="BackoffLimitExceeded"), [failed], phase="Running"))
    assert update.message == "the engine failed to load: no GPU"


def test_the_words_of_the_status_keep_their_values() -> None:
    """The tests above compare with the enums; what kubectl, the chart's alerts and people's scripts read is
    their values, which stay as they are."""
    assert [str(phase) for phase in Phase] == [
        "Pending",
        "Queued",
        "Scheduling",
        "LoadingEngine",
        "Running",
        "Succeeded",
        "Failed",
        "Cancelled",
    ]
    assert [str(kind) for kind in ConditionType] == [
        "Scheduled",
        "EngineLoaded",
        "Complete",
        "Failed",
        "Retrying",
        "Admitted",
        "Preempted",
        "Regressed",
    ]
    assert {str(reason) for reason in Reason} >= {
        "Created",
        "Retrying",
        "NotRetrying",
        "PodFailed",
        "PodNotCreated",
        "Unschedulable",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "InvalidConfig",
        "KueueNotInstalled",
        "LocalQueueNotFound",
        "EngineError",
        "OOMKilled",
        "DeadlineExceeded",
    }
