"""How many CPUs vLLM's CPU backend may compute on in a container, and the threads it is told to bind to them.

vLLM's CPU worker binds one compute thread to each CPU of its NUMA node it may run on (``VLLM_CPU_OMP_THREADS_BIND``
"auto", less the CPUs it reserves for its frontend). In a pod with a CPU limit, those CPUs are the node's (a
container's CPU set is every CPU unless the kubelet's static CPU manager gives it some of its own), while the
limit is a quota of CPU time of the container's cgroup: a 64-core node and a limit of 8 start 63 threads that
share 8 CPUs of time, and each compute step waits for the slowest of them to be scheduled again. So where the
quota allows fewer CPUs than the container may run on, vLLM is told to bind as many threads as the quota allows,
and the harness (batchmark.runner.dispatch.cpu_placement) keeps off them as it does off vLLM's own choice.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs a container may run on, and the CPUs' worth of time its cgroup's quota gives it (None: no quota)."""

    allowed: frozenset[int]
    quota: float | None

    @property
    def cpus(self) -> int:
        """CPUs it can keep busy: its quota rounded up, at most the CPUs it may run on."""
        return len(self.allowed) if self.quota is None else max(1, min(len(self.allowed), math.ceil(self.quota)))


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup as seen in a container (its cgroup's files at the root), in CPUs:
    cgroup v2's cpu.max, else v1's cpu.cfs_quota_us over cpu.cfs_period_us; None without a quota or a readable
    file."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for controller in ("cpu,cpuacct", "cpu"):
        try:
            quota_us = int((root / controller / "cpu.cfs_quota_us").read_text())
            period_us = int((root / controller / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    return None


def current_budget(root: Path = CGROUP_ROOT) -> CpuBudget:
    return CpuBudget(frozenset(os.sched_getaffinity(0)), cgroup_quota(root))


def threads_bind(budget: CpuBudget, environ: Mapping[str, str], engine_ranks: int) -> str | None:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` that keeps vLLM's compute threads within the quota: the lowest
    ``budget.cpus`` CPUs it may run on, as vLLM's list syntax; None where vLLM's own choice stands (the user set
    the variable, no quota caps it, or several ranks would need a list each)."""
    if environ.get(THREADS_BIND, "auto") != "auto" or engine_ranks != 1 or budget.cpus >= len(budget.allowed):
        return None
    return ",".join(str(cpu) for cpu in sorted(budget.allowed)[: budget.cpus])
