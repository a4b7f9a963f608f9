"""Phases never go backwards: every status change of many benchmarks at once (plain, sweep, failed, cancelled,
queued through the real Kueue), as `kubectl get bb -w` shows them, is a path of the documented state machine:
Pending -> (Queued) -> Scheduling -> LoadingEngine -> Running -> Succeeded | Failed | Cancelled.

A phase may be skipped (a pod faster than a watch), never returned to; the one way back, Queued after a Kueue
preemption, is not provoked here (test_kueue_queueing.py covers it)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
import yaml

from tests.integration.operator.conftest import example, kubectl_apply, wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.integration.operator.test_kueue_queueing import (
    ClusterObjects,
    gpu_queue,
    objects,
    phase_histories,
    queued_run,
    watch_phases,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

__all__ = ["objects"]  # the fixture, used by name

ORDER = ["Pending", "Queued", "Scheduling", "LoadingEngine", "Running"]
FINISHED = {"Succeeded", "Failed", "Cancelled"}


def is_a_path(history: list[str]) -> bool:
    """Each phase after the one before it in ORDER, and a finished phase only last."""
    ranks = [len(ORDER) if phase in FINISHED else ORDER.index(phase) for phase in history]
    return all(before < after for before, after in itertools.pairwise(ranks)) and all(
        phase in ORDER or phase in FINISHED for phase in history
    )


def test_the_path_check_itself() -> None:
    assert is_a_path(["Pending", "Scheduling", "LoadingEngine", "Running", "Succeeded"])
    assert is_a_path(["Pending", "Queued", "Scheduling", "Running", "Succeeded"])
    assert not is_a_path(["Pending", "Scheduling", "Running", "Scheduling", "Succeeded"])  # the sweep's bug
    assert not is_a_path(["Pending", "Failed", "Scheduling"])


def short(name: str, **spec: Any) -> dict[str, Any]:
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 40}]
    manifest["spec"].update(spec)
    return manifest


def test_phases_never_go_backwards(
    batchmark_operator: InstalledOperator, objects: ClusterObjects, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    gpu_queue(objects, kube_namespace, gpus=2)
    sweep = example("simulated-sweep.yaml", name="sweep")
    long_running = short("cancelled")
    long_running["spec"]["constraints"] = [{"kind": "max_duration", "seconds": 60}]
    long_running["spec"]["profile"] = {"kind": "constant", "rate": 20}
    manifests = [
        *(short(f"plain-{index}") for index in range(3)),
        sweep,
        *(example("simulated-sweep.yaml", name=f"sweep-{index}") for index in range(2)),
        short("failed", resources={"limits": {"nvidia.com/gpu": 1, "memory": "64Mi"}}),  # OOMKilled
        long_running,
        *(queued_run(f"queued-{index}", seconds=2) for index in range(4)),  # 2 GPUs for 4: two wait
    ]
    watcher = watch_phases(cluster, kube_namespace)
    try:
        time.sleep(1)
        applied = kubectl_apply(cluster, kube_namespace, yaml.safe_dump_all(manifests))
        assert applied.returncode == 0, applied.stderr
        wait_for_phase(cluster, kube_namespace, "cancelled", {"Running"}, 180)
        patched = cluster.kubectl(
            "patch", "bb", "cancelled", "-n", kube_namespace, "--type=merge", "-p", '{"spec":{"cancel":true}}'
        )
        assert patched.returncode == 0
        expected = dict.fromkeys((manifest["metadata"]["name"] for manifest in manifests), "Succeeded")
        expected |= {"failed": "Failed", "cancelled": "Cancelled"}
        for name, phase in expected.items():
            found = wait_for_phase(cluster, kube_namespace, name, FINISHED, 300)
            assert found["status"]["phase"] == phase, (name, found["status"])
        time.sleep(2)  # the last changes reach the watch
    finally:
        watcher.terminate()
        output, _ = watcher.communicate(timeout=10)
    histories = phase_histories(output)
    assert set(histories) == set(expected)
    backwards = {name: history for name, history in histories.items() if not is_a_path(history)}
    assert not backwards, backwards
    assert all(histories[name][-1] == phase for name, phase in expected.items()), histories
    assert any("Queued" in histories[f"queued-{index}"] for index in range(4)), histories
