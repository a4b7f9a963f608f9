"""Keeps the harness off the CPUs the engine computes on, where the engine has bound itself to some.

vLLM's CPU backend binds each model worker's threads to CPUs of its own (``VLLM_CPU_OMP_THREADS_BIND``, "auto"
by default) and leaves the rest, the "reserved" CPUs, to its engine core and its frontend. batchmark's
processes are frontend work: left to the kernel, they land on the model worker's CPUs as often as not (seen on
2 cores: the worker process, which hosts vLLM's frontend, ran on the model's core in about half the samples)
and each time they do, an engine step waits. Once the engine has loaded, every thread of the run's own
processes (the main process and the engine worker, vLLM's frontend threads in it included) is moved to the
CPUs that no bound engine process uses.

Where nothing bound itself (vLLM on a GPU: its processes float over every CPU; the simulated engine), or where
the bound processes use every CPU the run may use, nothing moves. Only this run's processes are moved, never
vLLM's own engine processes: their placement is vLLM's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class Placement:
    engine_cpus: frozenset[int]  # the CPUs the engine's bound processes compute on
    harness_cpus: frozenset[int]  # the rest of those this process may use


def plan(engine_pids: Iterable[int]) -> Placement | None:
    """Where the harness goes: the CPUs this process may use that none of the engine's processes bound to fewer
    CPUs (their main thread's affinity) computes on; None when none is bound or none is left, and then the
    harness stays where the kernel puts it."""
    allowed = os.sched_getaffinity(0)
    bound: set[int] = set()
    for pid in engine_pids:
        try:
            cpus = os.sched_getaffinity(pid)
        except OSError:
            continue  # gone meanwhile
        if cpus < allowed:
            bound |= cpus
    spare = allowed - bound
    return Placement(frozenset(bound), frozenset(spare)) if bound and spare else None


def place_process(pid: int, cpus: Iterable[int]) -> None:
    """Move every thread of the process to ``cpus``; threads it starts later inherit their creator's CPUs."""
    chosen = set(cpus)
    for task in (_PROC / str(pid) / "task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), chosen)
