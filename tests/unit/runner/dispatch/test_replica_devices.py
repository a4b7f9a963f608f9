"""Each engine replica gets devices of its own: an even split of the GPUs, else of the CPUs the quota allows."""

from pathlib import Path

import pytest

from batchmark.runner.dispatch.replica_devices import (
    DeviceSplitError,
    ReplicaDevices,
    split_devices,
    visible_gpus,
)
from batchmark.runner.engines.cpu_budget import THREADS_BIND, CpuBudget


def test_one_replica_or_an_engine_without_devices_changes_nothing() -> None:
    assert split_devices(1, 1, gpus=["0", "1"]) == [ReplicaDevices(0)]
    assert split_devices(3, 0, gpus=[]) == [ReplicaDevices(0), ReplicaDevices(1), ReplicaDevices(2)]
    assert ReplicaDevices(0).describe() == "no device"


def test_gpus_are_split_evenly_in_order_by_what_each_engine_occupies() -> None:
    devices = split_devices(2, 2, gpus=["0", "1", "2", "3", "4"])
    assert [share.environ for share in devices] == [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert [share.describe() for share in devices] == ["GPUs 0,1", "GPUs 2,3"]
    assert all(share.cpus is None for share in devices)


def test_the_visible_gpus_come_from_cuda_visible_devices_else_the_device_nodes(tmp_path: Path) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-a, GPU-b"}, tmp_path) == ["GPU-a", "GPU-b"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) == []
    for name in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    # A container sees its own GPUs' nodes under their host numbers; CUDA numbers them from 0.
    assert visible_gpus({}, tmp_path) == ["0", "1"]
    assert visible_gpus({}, tmp_path / "missing") == []


def test_too_few_gpus_are_refused_naming_the_field_and_what_is_seen() -> None:
    with pytest.raises(DeviceSplitError, match=r"backend.replicas: 3 replicas of 2 GPU\(s\) each need 6 GPUs;"):
        split_devices(3, 2, gpus=["0", "1", "2", "3"])


def test_without_gpus_the_cpus_the_quota_allows_are_split_and_each_replica_bound_to_its_share() -> None:
    budget = CpuBudget(allowed=frozenset(range(8)), quota=5.0)
    devices = split_devices(2, 1, gpus=[], budget=budget, environ={})
    assert [share.cpus for share in devices] == [frozenset({0, 1}), frozenset({2, 3})]
    assert [share.environ for share in devices] == [{THREADS_BIND: "0,1"}, {THREADS_BIND: "2,3"}]
    assert devices[1].describe() == "CPUs 2,3"


def test_too_few_cpus_or_one_binding_for_all_are_refused() -> None:
    with pytest.raises(DeviceSplitError, match="3 replicas on a CPU need a CPU each; this process may keep 2 busy"):
        split_devices(3, 1, gpus=[], budget=CpuBudget(frozenset({0, 1}), None), environ={})
    with pytest.raises(DeviceSplitError, match=f"{THREADS_BIND} is set"):
        split_devices(2, 1, gpus=[], budget=CpuBudget(frozenset({0, 1}), None), environ={THREADS_BIND: "0-1"})


def test_with_more_cpus_than_replicas_at_least_one_is_left_to_the_harness() -> None:
    four = split_devices(2, 1, gpus=[], budget=CpuBudget(frozenset(range(4)), None), environ={})
    assert [share.cpus for share in four] == [frozenset({0}), frozenset({1})]
    as_many = split_devices(3, 1, gpus=[], budget=CpuBudget(frozenset(range(3)), None), environ={})
    assert [share.cpus for share in as_many] == [frozenset({0}), frozenset({1}), frozenset({2})]
