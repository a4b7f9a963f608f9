"""Start processes detached, record them by PID, and stop exactly those later, from any process.

A record holds the PID and the process' start time as the kernel counts it, so a PID that was reused by an
unrelated process after ours exited is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    """What identifies one process we started, as stored in its record file."""

    name: str
    pid: int
    start_ticks: int


def _start_ticks(pid: int) -> int | None:
    """The process' start time in clock ticks since boot, or None when there is no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name in field 2 may contain spaces and parentheses; the fields after its last ')' do not.
    fields_after_name = stat.rsplit(")", 1)[1].split()
    state = fields_after_name[0]
    if state in ("Z", "X"):
        return None
    return int(fields_after_name[19])


def is_alive(record: ProcessRecord) -> bool:
    """Whether the recorded process itself (not a later process with its PID) still runs."""
    return _start_ticks(record.pid) == record.start_ticks


def start_detached(
    name: str,
    command: Sequence[str],
    log_path: Path,
    pid_dir: Path,
    *,
    environment: Mapping[str, str] | None = None,
    working_directory: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start a process in a session of its own, its output appended to log_path, and record it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(environment) if environment is not None else None,
            cwd=working_directory,
            # A session of its own: signals to the terminal or to pytest's process group do not reach it,
            # and stopping its process group also stops anything it started in that group.
            start_new_session=True,
        )
    ticks = _start_ticks(process.pid)
    record = ProcessRecord(name=name, pid=process.pid, start_ticks=ticks if ticks is not None else -1)
    write_record(pid_dir, record)
    return process, record


def write_record(pid_dir: Path, record: ProcessRecord) -> None:
    """Store the record atomically, so a concurrent reader never sees half of it."""
    pid_dir.mkdir(parents=True, exist_ok=True)
    path = pid_dir / f"{record.name}.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"name": record.name, "pid": record.pid, "start_ticks": record.start_ticks}))
    temporary.replace(path)


def record_for(pid: int, name: str) -> ProcessRecord | None:
    """The record of a live process we did not start through start_detached, or None if it is gone."""
    ticks = _start_ticks(pid)
    if ticks is None:
        return None
    return ProcessRecord(name=name, pid=pid, start_ticks=ticks)


def read_records(pid_dir: Path) -> list[ProcessRecord]:
    """All records in pid_dir, oldest first."""
    records: list[tuple[float, ProcessRecord]] = []
    for path in pid_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            mtime = path.stat().st_mtime
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        records.append((mtime, ProcessRecord(name=data["name"], pid=data["pid"], start_ticks=data["start_ticks"])))
    return [record for _, record in sorted(records, key=lambda item: item[0])]


def forget(pid_dir: Path, record: ProcessRecord) -> None:
    """Remove the record of a process that has ended."""
    (pid_dir / f"{record.name}.json").unlink(missing_ok=True)


def _signal_group(record: ProcessRecord, signal_number: signal.Signals) -> None:
    if not is_alive(record):
        return
    try:
        # Each process was started as the leader of its own process group, whose id is its PID.
        os.killpg(record.pid, signal_number)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(record.pid, signal_number)


def _reap(record: ProcessRecord) -> None:
    """Collect the exit status if the process is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(record.pid, os.WNOHANG)


def stop(record: ProcessRecord, grace_seconds: float) -> None:
    """SIGTERM the process' group, then SIGKILL it if it still runs after the grace period."""
    _signal_group(record, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(record)
        if not is_alive(record):
            return
        time.sleep(0.05)
    _signal_group(record, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        _reap(record)
        if not is_alive(record):
            return
        time.sleep(0.05)


def stop_all(pid_dir: Path, grace_seconds: float) -> list[ProcessRecord]:
    """Stop every recorded process, newest first (so clients stop before the servers they use)."""
    stopped: list[ProcessRecord] = []
    for record in reversed(read_records(pid_dir)):
        if is_alive(record):
            stop(record, grace_seconds)
            stopped.append(record)
        forget(pid_dir, record)
    return stopped
