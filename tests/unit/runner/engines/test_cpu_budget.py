"""vLLM's CPU threads within a container's CPU quota: the quota read from cgroup v1's or v2's files as a container
sees them, and the binding that follows (or vLLM's own choice, where nothing caps it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchmark.runner.engines.cpu_budget import THREADS_BIND, CpuBudget, cgroup_quota, threads_bind


def cgroup_v2(root: Path, cpu_max: str) -> Path:
    root.mkdir(parents=True)
    (root / "cpu.max").write_text(f"{cpu_max}\n")
    return root


def cgroup_v1(root: Path, quota_us: int, period_us: int = 100000) -> Path:
    controller = root / "cpu,cpuacct"
    controller.mkdir(parents=True)
    (controller / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (controller / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    return root


def test_the_quota_of_a_pods_cpu_limit_in_either_cgroup_version(tmp_path: Path) -> None:
    assert cgroup_quota(cgroup_v2(tmp_path / "v2-limit", "250000 100000")) == 2.5
    assert cgroup_quota(cgroup_v2(tmp_path / "v2-none", "max 100000")) is None
    assert cgroup_quota(cgroup_v1(tmp_path / "v1-limit", 150000)) == 1.5
    assert cgroup_quota(cgroup_v1(tmp_path / "v1-none", -1)) is None
    assert cgroup_quota(tmp_path / "no-cgroup-files") is None


@pytest.mark.parametrize(
    ("allowed", "quota", "expected"),
    [
        (range(64), 8.0, "0,1,2,3,4,5,6,7"),  # a limit of 8 on a 64-core node: 8 threads, not 63
        (range(64), 2.5, "0,1,2"),  # a part of a CPU is a thread of its own
        ({4, 5, 6, 7}, 2.0, "4,5"),  # a CPU set of its own (the kubelet's static CPU manager): within it
        (range(2), 0.5, "0"),
        (range(8), None, None),  # no limit: vLLM's own choice
        (range(8), 8.0, None),  # a limit of every CPU it may use: nothing to cap
    ],
)
def test_the_binding_holds_as_many_threads_as_the_quota_allows(
    allowed: range | set[int], quota: float | None, expected: str | None
) -> None:
    assert threads_bind(CpuBudget(frozenset(allowed), quota), {}, engine_ranks=1) == expected


def test_a_binding_the_user_chose_or_several_ranks_are_left_to_vllm() -> None:
    capped = CpuBudget(frozenset(range(64)), 8.0)
    assert threads_bind(capped, {THREADS_BIND: "0-15|16-31"}, engine_ranks=1) is None
    assert threads_bind(capped, {THREADS_BIND: "auto"}, engine_ranks=1) == "0,1,2,3,4,5,6,7"
    assert threads_bind(capped, {}, engine_ranks=2) is None
