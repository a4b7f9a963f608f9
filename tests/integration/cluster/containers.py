"""Looking at a pod's containers from this machine, where their processes run under the node's cgroups."""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def container_process(pod_uid: str, *words: str) -> int | None:
    """The PID (on this machine) of a process of the pod whose command line holds every word."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"pod{pod_uid}" in cgroups and all(word.encode() in command for word in words):
            return int(entry.name)
    return None


def ids(pid: int) -> tuple[list[int], list[int]]:
    """The process' real, effective, saved and file-system UIDs, and GIDs."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return [int(value) for value in fields["Uid"].split()], [int(value) for value in fields["Gid"].split()]


def process_gone(pid: int) -> bool:
    """Whether the process has ended (exited, or a zombie not yet collected)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def cpu_weight(pid: int) -> tuple[str, int]:
    """The CPU weight of the process' cgroup as the kernel keeps it: ("cpu.shares", N) under cgroup v1's cpu
    controller, ("cpu.weight", N) under cgroup v2."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return "cpu.shares", int((CGROUP_ROOT / controllers / path.lstrip("/") / "cpu.shares").read_text())
        if hierarchy == "0" and not controllers and (CGROUP_ROOT / "cgroup.controllers").exists():
            return "cpu.weight", int((CGROUP_ROOT / path.lstrip("/") / "cpu.weight").read_text())
    raise LookupError(f"process {pid} is in no cgroup with a CPU weight")
