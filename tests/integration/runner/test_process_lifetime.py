"""However ``batchmark run`` ends, no process it started outlives it (simulated engine, both dispatch modes).

tests/integration/vllm/test_exit_paths.py runs the same paths on the real engine, whose EngineCore and
Worker processes are the ones that leaked; here the mechanism itself is tested where it is cheap: the worker
and its process group, with processes standing in for vLLM's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from batchmark.runner.dispatch.process_group import (
    EngineProcess,
    engine_processes,
    kill_group,
    leftover_engines_warning,
    wait_group_empty,
)
from tests.cli import command
from tests.integration.process_tree import descendants, still_alive, wait_gone

pytestmark = pytest.mark.integration

DATA = "kind=synthetic_text,prompt_tokens=64,output_tokens=32"
# The bounds docs/engine.md states: when `batchmark run` exits on its own, every process it started has ended
# (Python's multiprocessing resource tracker, a child of the main process, notices within a moment);
# when the main process is SIGKILLed, its worker ends the whole group on the parent-death signal.
AFTER_EXIT_SECONDS = 2.0
AFTER_MAIN_SIGKILL_SECONDS = 2.0


def start_run(tmp_path: Path, dispatch: str, constraint: str, backend: str = "") -> tuple[subprocess.Popen[str], Path]:
    output = tmp_path / "out.json"
    process = subprocess.Popen(
        command(
            "run",
            "--quiet",
            "--backend",
            f"kind=vllm_python_batch,model=m,batch_size=4,engine=simulated,dispatch={dispatch}{backend}",
            "--data",
            DATA,
            "--profile",
            "kind=throughput,max_concurrency=8",
            "--constraint",
            constraint,
            "--output",
            str(output),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Its own process group, as a shell gives a command: a group SIGINT is what Ctrl-C sends.
        start_new_session=True,
    )
    return process, output


def wait_running(process: subprocess.Popen[str]) -> str:
    """Read the run's stderr until its first benchmark started; returns what was read."""
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while "benchmark 1" not in seen and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen += line
    assert "benchmark 1" in seen, seen
    return seen


def worker_of(main_pid: int) -> int:
    """The engine worker: the main process's child that leads a process group of its own."""
    for pid in descendants(main_pid):
        try:
            if os.getpgid(pid) == pid:
                return pid
        except ProcessLookupError:
            continue
    raise AssertionError(f"no engine worker below {main_pid}")


@pytest.mark.parametrize("dispatch", ["batch", "continuous"])
@pytest.mark.parametrize(
    ("ending", "constraint", "exit_code"),
    [
        ("normal end", "kind=max_requests,count=24", 0),
        ("a constraint stops it with requests in flight", "kind=max_duration,seconds=1.5", 0),
        ("SIGINT to the process group (Ctrl-C)", "kind=max_duration,seconds=120", 130),
        ("SIGTERM to the main process", "kind=max_duration,seconds=120", 143),
        ("the worker is SIGKILLed", "kind=max_duration,seconds=120", None),
    ],
)
def test_no_process_outlives_the_run(
    tmp_path: Path, dispatch: str, ending: str, constraint: str, exit_code: int | None
) -> None:
    process, output = start_run(tmp_path, dispatch, constraint)
    try:
        wait_running(process)
        started = descendants(process.pid)
        worker = worker_of(process.pid)
        time.sleep(0.5)
        if ending.startswith("SIGINT"):
            os.killpg(process.pid, signal.SIGINT)
        elif ending.startswith("SIGTERM"):
            process.send_signal(signal.SIGTERM)
        elif ending.startswith("the worker"):
            os.kill(worker, signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    alive, _ = wait_gone(started, AFTER_EXIT_SECONDS)
    assert alive == [], f"{ending}: still running after `batchmark run` exited: {alive}"
    if exit_code is None:
        assert process.returncode == 3, stderr  # docs/running.md's exit code for an engine that died
        assert "killed by SIGKILL" in stderr
    else:
        assert process.returncode == exit_code, stderr
        report = json.loads(output.read_text())
        assert report["dispatch"] == dispatch
        assert report["benchmarks"][0]["requests"]["completed"] > 0


@pytest.mark.parametrize("dispatch", ["batch", "continuous"])
def test_a_sigkilled_main_process_takes_its_worker_along(tmp_path: Path, dispatch: str) -> None:
    process, _ = start_run(tmp_path, dispatch, "kind=max_duration,seconds=120")
    try:
        wait_running(process)
        started = descendants(process.pid)
        assert started
        process.kill()
        process.communicate(timeout=10)
    finally:
        process.kill()
    alive, took = wait_gone(started, AFTER_MAIN_SIGKILL_SECONDS)
    assert alive == [], f"still running {took:.1f} s after the main process was SIGKILLed: {alive}"


# A stand-in for the worker and vLLM: a process that leads its group and starts children of its own, one
# of which, like vLLM's engine core, ignores SIGTERM and would outlive its parent. It prints their PIDs.
GROUP_WITH_CHILDREN = textwrap.dedent(
    """
    import multiprocessing, os, subprocess, sys, time
    from batchmark.runner.dispatch.process_group import lead_own_group

    def worker(parent_pid, conn):
        lead_own_group(parent_pid)
        ignore_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        stubborn = subprocess.Popen([sys.executable, "-c", ignore_sigterm])
        plain = subprocess.Popen(["sleep", "300"])
        conn.send([os.getpid(), stubborn.pid, plain.pid])
        time.sleep(300)

    if __name__ == "__main__":
        parent, child = multiprocessing.Pipe()
        process = multiprocessing.get_context(sys.argv[1]).Process(target=worker, args=(os.getpid(), child))
        process.start()
        print(" ".join(map(str, parent.recv())), flush=True)
        time.sleep(300)
    """
)


def start_group_with_children(tmp_path: Path, context: str) -> subprocess.Popen[str]:
    script = tmp_path / "group_with_children.py"  # a file: spawn re-imports the main module by path
    script.write_text(GROUP_WITH_CHILDREN)
    return subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_the_worker_ends_its_whole_group_when_the_main_process_is_sigkilled(tmp_path: Path, context: str) -> None:
    main = start_group_with_children(tmp_path, context)
    try:
        assert main.stdout is not None
        worker, *children = map(int, main.stdout.readline().split())
        group = descendants(main.pid)
        assert {worker, *children} <= set(group)
        main.kill()
        main.wait(timeout=10)
    finally:
        main.kill()
    alive, took = wait_gone(group, AFTER_MAIN_SIGKILL_SECONDS)
    assert alive == [], f"still running {took:.1f} s after the main process was SIGKILLed: {alive}"


def test_killing_the_group_ends_what_a_dead_worker_left_behind(tmp_path: Path) -> None:
    main = start_group_with_children(tmp_path, "spawn")
    try:
        assert main.stdout is not None
        worker, *children = map(int, main.stdout.readline().split())
        orphans = {pid: start for pid, start in descendants(main.pid).items() if pid in children}
        os.kill(worker, signal.SIGKILL)
        time.sleep(0.5)
        assert len(still_alive(orphans)) == len(children)  # the leak, as it was: the worker died alone
        kill_group(worker)
        assert wait_group_empty(worker, 2.0)
        assert still_alive(orphans) == []
    finally:
        main.kill()
        main.wait(timeout=10)


def test_a_run_warns_about_engine_processes_left_by_an_earlier_run(tmp_path: Path) -> None:
    # What a leaked engine core looks like: a process titled VLLM::EngineCore holding memory.
    leftover = subprocess.Popen(
        [
            "bash",
            "-c",
            f'exec -a VLLM::EngineCore {sys.executable} -c "import time; x = bytearray(96 << 20); time.sleep(300)"',
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not any(p.pid == leftover.pid and p.rss_bytes > 90 << 20 for p in engine_processes()):
            assert time.monotonic() < deadline, engine_processes()
            time.sleep(0.05)
        process, _ = start_run(tmp_path, "batch", "kind=max_requests,count=8")
        _, stderr = process.communicate(timeout=60)
    finally:
        leftover.kill()
        leftover.wait()
    assert process.returncode == 0, stderr
    message = " ".join(stderr.split())
    assert "warning:" in message
    assert f"VLLM::EngineCore (pid {leftover.pid}, 0.1 GiB" in message
    # Other VLLM:: processes on the machine (another run's) may be named too; ours must be among those to kill.
    assert str(leftover.pid) in message.rsplit("end them with: kill", 1)[1].split()


def test_the_warning_names_every_process_and_their_memory() -> None:
    assert leftover_engines_warning([]) is None
    text = leftover_engines_warning(
        [
            EngineProcess(101, "VLLM::EngineCore", 1 << 30, orphaned=True),
            EngineProcess(102, "VLLM::Worker", 2 << 30, orphaned=False),
        ]
    )
    assert text is not None
    assert "2 vLLM engine processes are already running and hold 3.0 GiB" in text
    assert "VLLM::EngineCore (pid 101, 1.0 GiB, orphaned: left by a program that ended)" in text
    assert "VLLM::Worker (pid 102, 2.0 GiB)" in text
    assert text.endswith("kill 101 102")
