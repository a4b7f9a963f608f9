"""Which devices each engine replica of a run gets: an even split of the GPUs this process sees, or on a machine
without GPUs, of the CPUs it may use.

Replicas are independent engines (vLLM's offline ``LLM`` has no data parallelism), so each must be kept to
devices of its own: on GPUs through ``CUDA_VISIBLE_DEVICES`` (each replica then sees its own GPUs as 0..k-1, as
vLLM expects), on a CPU through the worker process's CPU affinity and vLLM's ``VLLM_CPU_OMP_THREADS_BIND``,
which its compute threads are bound by. An engine that occupies no device (the simulated one) needs no split.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from batchmark.runner.engines.cpu_budget import THREADS_BIND, CpuBudget, current_budget

GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
_GPU_DEVICE = re.compile(r"^nvidia\d+$")


class DeviceSplitError(ValueError):
    """The replicas cannot each get devices of their own here; the message says what is missing."""


@dataclass(frozen=True)
class ReplicaDevices:
    """One replica's share, applied in its worker process before the engine loads."""

    replica: int
    environ: Mapping[str, str] = field(default_factory=dict)  # set in the worker's environment
    cpus: frozenset[int] | None = None  # the worker's (and so vLLM's processes') CPU affinity; None: unchanged

    def describe(self) -> str:
        if GPU_VARIABLE in self.environ:
            return f"GPUs {self.environ[GPU_VARIABLE]}"
        if self.cpus is not None:
            return f"CPUs {_cpu_list(self.cpus)}"
        return "no device"

    def apply(self) -> None:
        """In the worker, before anything loads."""
        os.environ.update(self.environ)
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)


def visible_gpus(environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them: its entries when set, otherwise one
    index per NVIDIA device node (a container sees only its own GPUs' nodes; CUDA numbers them from 0)."""
    environ = os.environ if environ is None else environ
    listed = environ.get(GPU_VARIABLE)
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    try:
        count = sum(1 for entry in dev.iterdir() if _GPU_DEVICE.match(entry.name))
    except OSError:
        return []
    return [str(index) for index in range(count)]


def split_devices(
    replicas: int,
    gpus_per_replica: int,
    *,
    gpus: Sequence[str] | None = None,
    budget: CpuBudget | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[ReplicaDevices]:
    """Each replica's devices, in replica order; raises DeviceSplitError when there are too few.

    ``gpus_per_replica`` is what one engine occupies (0: no device, as the simulated engine). With one replica
    nothing changes: the engine sees what the run sees, as without replicas.
    """
    if replicas == 1 or gpus_per_replica == 0:
        return [ReplicaDevices(replica) for replica in range(replicas)]
    environ = os.environ if environ is None else environ
    gpus = visible_gpus(environ) if gpus is None else list(gpus)
    if gpus:
        needed = replicas * gpus_per_replica
        if len(gpus) < needed:
            raise DeviceSplitError(
                f"backend.replicas: {replicas} replicas of {gpus_per_replica} GPU(s) each need {needed} GPUs;"
                f" this process sees {len(gpus)} ({GPU_VARIABLE}={','.join(gpus)})"
            )
        return [
            ReplicaDevices(
                replica,
                environ={GPU_VARIABLE: ",".join(gpus[replica * gpus_per_replica : (replica + 1) * gpus_per_replica])},
            )
            for replica in range(replicas)
        ]
    return _split_cpus(replicas, budget or current_budget(), environ)


def _split_cpus(replicas: int, budget: CpuBudget, environ: Mapping[str, str]) -> list[ReplicaDevices]:
    """No GPU: vLLM's CPU build. The CPUs the quota lets the run keep busy, in contiguous equal shares, each
    replica's compute threads bound to its own share; the remainder is the harness's, and where there are more CPUs
    than replicas at least one is: vLLM's model workers spin on their CPUs between steps, and the load generator
    must not wait for them."""
    usable = sorted(budget.allowed)[: budget.cpus]
    share = (len(usable) - 1) // replicas if len(usable) > replicas else len(usable) // replicas
    if share == 0:
        raise DeviceSplitError(
            f"backend.replicas: {replicas} replicas on a CPU need a CPU each; this process may keep"
            f" {len(usable)} busy ({_cpu_list(usable)})"
        )
    if environ.get(THREADS_BIND, "auto") != "auto":
        raise DeviceSplitError(
            f"backend.replicas: {THREADS_BIND} is set ({environ[THREADS_BIND]}), which would bind every replica's"
            " compute threads to the same CPUs; unset it and each replica is bound to its own share"
        )
    devices = []
    for replica in range(replicas):
        cpus = frozenset(usable[replica * share : (replica + 1) * share])
        devices.append(ReplicaDevices(replica, environ={THREADS_BIND: _cpu_list(cpus)}, cpus=cpus))
    return devices


def _cpu_list(cpus: frozenset[int] | Sequence[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))
