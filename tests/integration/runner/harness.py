"""`batchmark` as a real program under test: started in its own session, watched through /proc, signalled at
chosen moments, and checked afterwards for what it wrote and for any process it left behind."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tests.cli import Finished, command, read_results

DATA = "kind=synthetic_text,prompt_tokens=64,output_tokens=16"
MARKER_VARIABLE = "BATCHMARK_TEST_PROGRAM"


def backend(**changes: object) -> str:
    """A --backend spec on the simulated engine; ``time_scale`` and the dotted keys as given. ``dispatch=stream``
    is the async backend (kind=vllm_python_async), which takes no batch settings."""
    settings: dict[str, object] = {
        "kind": "vllm_python_batch",
        "model": "m",
        "batch_size": 8,
        "engine": "simulated",
        "dispatch": "batch",
        "simulation.time_scale": changes.pop("time_scale", 0.0),
        **changes,
    }
    if settings["dispatch"] == "stream":
        settings["kind"] = "vllm_python_async"
        del settings["dispatch"], settings["batch_size"]
    return ",".join(f"{key}={value}" for key, value in settings.items())


def run_args(
    backend_spec: str | None = None,
    *,
    constraint: str = "kind=max_requests,count=40",
    profile: str = "kind=throughput,max_concurrency=16",
    outputs: list[Path] = (),  # type: ignore[assignment]
    extra: list[str] = (),  # type: ignore[assignment]
) -> list[str]:
    args = ["run", "--quiet", "--backend", backend_spec or backend(), "--data", DATA, "--profile", profile]
    args += ["--constraint", constraint]
    for output in outputs:
        args += ["--output", str(output)]
    return args + list(extra)


def stepped_run_args(step_fixed: float, *extra: str) -> list[str]:
    """`run` on the simulated engine whose every step takes ``step_fixed`` seconds and more, slept in full
    (time_scale 1, so that a loaded machine's harness moves the throughput little): 64 short requests in batches
    of 16; ``extra`` options after."""
    return ["run", "--quiet", *stepped_options(step_fixed, *extra)]


def stepped_options(step_fixed: float, *extra: str, time_scale: float = 1.0) -> list[str]:
    """The options of `stepped_run_args`, its steps slept at ``time_scale``."""
    return [
        "--backend",
        "kind=vllm_python_batch,model=m,engine=simulated,batch_size=16,batch_timeout=0.005,"
        f"simulation.time_scale={time_scale},simulation.step_fixed_seconds={step_fixed}",
        "--data",
        "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
        "--profile",
        "kind=throughput,max_concurrency=32",
        "--constraint",
        "kind=max_requests,count=64",
        *extra,
    ]


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def marked_processes(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment carries the marker: everything a program started, however
    it regrouped them (new sessions, process groups), since children inherit the environment."""
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    found = []
    for pid in _pids():
        fields = _stat(pid)
        if fields is None or fields[0] == "Z":
            continue
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environment.split(b"\0"):
            found.append(pid)
    return found


def children(pid: int) -> list[int]:
    return [child for child in _pids() if (fields := _stat(child)) is not None and int(fields[1]) == pid]


def leads_own_session(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and int(fields[3]) == pid


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def catches(pid: int, number: int) -> bool:
    """Whether the process has a handler for the signal (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask & (1 << (number - 1)))


@dataclass
class Outcome(Finished):
    seconds_after_signal: float | None


class Program:
    """One `batchmark` process in a session of its own; stdout and stderr go to files, read as it runs."""

    # The programs started by the test that runs now: a test that fails before finish() would otherwise leave its
    # run (and a real engine's processes) working through the tests after it (tests/conftest.py ends them).
    started: ClassVar[list[Program]] = []

    def __init__(
        self, tmp_path: Path, args: list[str], env: dict[str, str] | None = None, python: Path | None = None
    ) -> None:
        self.marker = uuid.uuid4().hex
        self._stdout = tmp_path / f"stdout-{time.monotonic_ns()}.txt"
        self._stderr = self._stdout.with_name(self._stdout.name.replace("stdout", "stderr"))
        with self._stdout.open("w") as stdout, self._stderr.open("w") as stderr:
            self.process = subprocess.Popen(
                command(*args, python=python or sys.executable),
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, "COLUMNS": "200", **(env or {}), MARKER_VARIABLE: self.marker},
                start_new_session=True,
            )
        self.pid = self.process.pid
        self.signalled_at: float | None = None
        Program.started.append(self)

    def stderr(self) -> str:
        return self._stderr.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr():
            assert self.process.poll() is None, f"exited with {self.process.returncode}:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"{text!r} never appeared:\n{self.stderr()}"
            time.sleep(0.02)

    def wait_until(self, condition: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"exited with {self.process.returncode}:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"never {what}:\n{self.stderr()}"
            time.sleep(0.005)

    def wait_for_handlers(self) -> None:
        self.wait_until(lambda: catches(self.pid, signal.SIGTERM), "installed its signal handlers", timeout=30)

    def worker(self, timeout: float = 60) -> int:
        """The engine's process, known by leading a session of its own (the first thing it does).

        Not by its command line: multiprocessing's resource tracker, and the engine's process too, are forks
        of the main process with its command line until they exec, and killing the tracker there leaves a run
        whose engine loads on unharmed.
        """
        return self.workers(1, timeout)[0]

    def workers(self, count: int, timeout: float = 60) -> list[int]:
        """The engine replicas' processes (``worker``), once ``count`` of them have started."""
        found: list[int] = []

        def started() -> bool:
            found[:] = [pid for pid in children(self.pid) if leads_own_session(pid)]
            return len(found) >= count

        self.wait_until(started, f"started {count} engine process(es)", timeout)
        return found

    def send(self, number: int) -> None:
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        os.kill(self.pid, number)

    def finish(self, timeout: float = 60) -> Outcome:
        """Wait for the exit, then check that nothing of the session is left running."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_descendants()
            raise
        ended = time.monotonic()
        left = self.wait_for_descendants_to_end()
        if left:
            self.kill_descendants()
        assert not left, f"processes left behind: {[cmdline(pid) for pid in left]}"
        stdout = self._stdout.read_text(errors="replace")
        after = None if self.signalled_at is None else ended - self.signalled_at
        return Outcome(self.process.returncode, stdout, self.stderr(), after)

    def wait_for_descendants_to_end(self, timeout: float = 15) -> list[int]:
        deadline = time.monotonic() + timeout
        while (left := marked_processes(self.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    def kill_descendants(self) -> None:
        for pid in marked_processes(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue

    @classmethod
    def end_leftovers(cls) -> None:
        """Kill whatever the programs of the test that just ended left running, and forget them."""
        for program in cls.started:
            program.kill_descendants()
            if program.process.poll() is None:
                program.process.kill()
            program.process.wait()
        cls.started.clear()


def batchmark(tmp_path: Path, args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> Outcome:
    return Program(tmp_path, args, env).finish(timeout)


def assert_clean(outcome: Outcome) -> None:
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert "Traceback" not in outcome.stdout, outcome.stdout


def assert_outputs(paths: list[Path], *, complete: bool, benchmarks: int, stop_reason: str | None = None) -> None:
    """Every output exists, says the same thing, and no partial file is left beside it."""
    documents = [read_results(path) for path in paths if path.suffix in (".json", ".yaml")]
    assert documents, "check at least one JSON or YAML output"
    for document in documents:
        assert document["complete"] is complete
        assert len(document["benchmarks"]) == benchmarks
        if stop_reason is not None:
            assert stop_reason in document["stop_reason"]
    for path in paths:
        assert path.exists(), path
        assert not list(path.parent.glob(f".{path.name}*")), f"a partial file is left beside {path}"
        if path.suffix == ".csv":
            with path.open() as table:
                assert len(list(csv.DictReader(table))) == benchmarks
        if path.suffix == ".html":
            text = path.read_text()
            assert text.rstrip().endswith("</html>")
            assert ("INCOMPLETE" in text) is not complete
