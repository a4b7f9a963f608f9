"""The engine worker's process group: every process the engine starts ends with the run, however it ends.

vLLM's default multiprocessing starts an ``EngineCore`` process beside whoever builds ``LLM``, and that
process its ``Worker`` processes. Nothing in vLLM ends the engine core when its parent dies: left alone, it
keeps its memory (its share of the GPU) until someone kills it. So the worker process leads a session of its
own, every process vLLM starts inherits its process group, and the group is ended by its id:

* by the main process, after the worker's graceful exit or in place of it, and whenever the worker died;
* by the worker itself when the main process dies (parent-death signal, Linux), even by SIGKILL.

A new session also keeps a terminal's Ctrl-C away from the engine: the main process decides how a run ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ENGINE_PROCESS_PREFIX = "VLLM::"  # vLLM's process titles: VLLM::EngineCore, VLLM::Worker, ...
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PROC = Path("/proc")


def lead_own_group(parent_pid: int) -> None:
    """In the worker, first thing: lead a new session, and end the whole group when the main process dies.

    Neither Ctrl-C nor a signal to the main process's group (a pod's SIGTERM, where the node signals the
    group) reaches the worker or vLLM's processes any more: the main process decides how a run ends. Those
    that came before, while ``EngineWorker.start`` had SIGINT and SIGTERM blocked, are discarded. From then
    on SIGTERM (from the main process, or the parent-death signal) kills every process of the group at once,
    this one included: a dead or departing main process wants the engine's memory back, not a graceful exit.
    """
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGTERM, _end_own_group)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # The parent may have died before the signal was armed: then nobody would ever send it.
    if os.getppid() != parent_pid:
        _end_own_group(signal.SIGTERM, None)


def _end_own_group(signum: int, frame: FrameType | None) -> None:
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(128 + signum)


def kill_group(group_id: int) -> None:
    """SIGKILL every process left in the group; nothing happens when it is empty."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group_id, signal.SIGKILL)


def group_members(group_id: int, exclude: int | None = None) -> list[int]:
    """Live processes (zombies left out) in the process group, from /proc; empty where there is no /proc."""
    members = []
    for stat in _PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, pgrp = fields[0], int(fields[2])
        pid = int(stat.parent.name)
        if pgrp == group_id and pid != exclude and state not in ("Z", "X"):
            members.append(pid)
    return members


def wait_group_empty(group_id: int, timeout: float, exclude: int | None = None) -> bool:
    """Wait until no live process but ``exclude`` is left in the group; False on timeout."""
    deadline = time.monotonic() + timeout
    while group_members(group_id, exclude):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@dataclass(frozen=True)
class EngineProcess:
    """A running vLLM engine process, as /proc shows it."""

    pid: int
    title: str  # e.g. VLLM::EngineCore
    rss_bytes: int
    orphaned: bool  # its parent is gone (it was re-parented to init or a subreaper)


def engine_processes() -> list[EngineProcess]:
    """Every ``VLLM::`` process on this machine; empty where there is no /proc."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    found = []
    for cmdline in _PROC.glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().split(b"\0", 1)[0].decode(errors="replace").strip()
            if not title.startswith(ENGINE_PROCESS_PREFIX):
                continue
            rss_pages = int((cmdline.parent / "statm").read_text().split()[1])
            parent = int((cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        pid = int(cmdline.parent.name)
        found.append(EngineProcess(pid, title.split()[0], rss_pages * page, orphaned=parent == 1))
    return sorted(found, key=lambda process: process.pid)


def leftover_engines_warning(processes: list[EngineProcess]) -> str | None:
    """What to tell a user whose machine already runs vLLM engine processes when a run starts."""
    if not processes:
        return None
    total = sum(process.rss_bytes for process in processes)
    listed = ", ".join(
        f"{process.title} (pid {process.pid}, {_gib(process.rss_bytes)}"
        f"{', orphaned: left by a program that ended' if process.orphaned else ''})"
        for process in processes
    )
    pids = " ".join(str(process.pid) for process in processes)
    many = len(processes) > 1
    return (
        f"{len(processes)} vLLM engine process{'es are' if many else ' is'} already running and "
        f"hold{'' if many else 's'} {_gib(total)} of memory (on a GPU, also {'their' if many else 'its'} share "
        f"of the GPU's): {listed}. This run's engine may not find the memory for its KV cache. If they are "
        f"left over from an earlier run, end them with: kill {pids}"
    )


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"
