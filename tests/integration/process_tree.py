"""Which processes a test's run started, and whether any of them outlived it (Linux /proc).

A process is recorded with its start time as the kernel counts it, so a PID reused after ours exited is
never mistaken for ours.
"""

from __future__ import annotations

import time
from pathlib import Path

from batchmark.runner.dispatch.process_group import engine_processes

PROC = Path("/proc")

Processes = dict[int, int]  # pid -> start time in clock ticks since boot


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name; None when there is no such live process."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def descendants(root: int) -> Processes:
    """Every live process below ``root`` now."""
    parents: dict[int, int] = {}
    starts: Processes = {}
    for entry in PROC.glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            parents[int(entry.name)] = int(fields[1])
            starts[int(entry.name)] = int(fields[19])
    found: Processes = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = starts[pid]
                frontier.append(pid)
    return found


def engine_processes_now() -> Processes:
    """Every ``VLLM::`` process on the machine now."""
    found: Processes = {}
    for process in engine_processes():
        fields = _stat(process.pid)
        if fields is not None:
            found[process.pid] = int(fields[19])
    return found


def marked_with(recorded: Processes, variable: str, value: str) -> Processes:
    """The recorded processes whose environment sets ``variable`` to ``value`` (children inherit it)."""
    needle = f"{variable}={value}".encode()
    marked: Processes = {}
    for pid, start in recorded.items():
        try:
            environment = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if needle in environment.split(b"\0"):
            marked[pid] = start
    return marked


def still_alive(recorded: Processes) -> list[str]:
    """The recorded processes that still run, described by PID and command line."""
    alive = []
    for pid, start in recorded.items():
        fields = _stat(pid)
        if fields is not None and int(fields[19]) == start:
            try:
                command = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            alive.append(f"{pid}: {command.strip()[:120]}")
    return alive


def wait_gone(recorded: Processes, timeout: float) -> tuple[list[str], float]:
    """Wait up to ``timeout`` for every recorded process to end; what still runs then, and the time it took."""
    started = time.monotonic()
    while (alive := still_alive(recorded)) and time.monotonic() - started < timeout:
        time.sleep(0.05)
    return alive, time.monotonic() - started
