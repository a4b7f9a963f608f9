"""The harness leaves the CPUs a bound engine process computes on: real processes, real affinities."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchmark.runner.dispatch.cpu_placement import Placement, place_process, plan

ALLOWED = os.sched_getaffinity(0)
THREADED_CHILD = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", THREADED_CHILD + "time.sleep(60)"])
    deadline = time.monotonic() + 10
    while len(list(Path(f"/proc/{process.pid}/task").iterdir())) < 4:  # its main thread and three more
        assert time.monotonic() < deadline, "the child never started its threads"
        time.sleep(0.02)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_the_harness_gets_the_cpus_no_bound_process_uses(child: subprocess.Popen[bytes]) -> None:
    assert len(ALLOWED) >= 2, "the placement needs a machine of two CPUs or more to mean anything"
    engine_cpu = min(ALLOWED)
    os.sched_setaffinity(child.pid, {engine_cpu})
    assert plan([child.pid]) == Placement(frozenset({engine_cpu}), frozenset(ALLOWED - {engine_cpu}))


def test_nothing_moves_where_no_engine_process_is_bound(child: subprocess.Popen[bytes]) -> None:
    assert plan([child.pid]) is None
    assert plan([]) is None


def test_nothing_moves_where_the_bound_processes_use_every_cpu(child: subprocess.Popen[bytes]) -> None:
    # Two engine processes, each bound to part of the CPUs, together to all of them: nothing is spare.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cpus = sorted(ALLOWED)
        os.sched_setaffinity(child.pid, set(cpus[: len(cpus) // 2]))
        os.sched_setaffinity(other.pid, set(cpus[len(cpus) // 2 :]))
        assert plan([child.pid, other.pid]) is None
    finally:
        other.kill()
        other.wait()


def test_a_process_that_ended_is_no_engine_process() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert plan([ended.pid]) is None


def test_every_thread_of_the_process_moves(child: subprocess.Popen[bytes]) -> None:
    target = {max(ALLOWED)}
    place_process(child.pid, target)
    threads = list(Path(f"/proc/{child.pid}/task").iterdir())
    assert len(threads) == 4
    assert all(os.sched_getaffinity(int(thread.name)) == target for thread in threads)
