"""`batchmark` as the tests run it: in this process (``main``, its output and exit code captured), or as a program
of its own the way users run it, and the step most tests share, a run whose results file is read back.

The program is ``python -m batchmark.runner``, the module the ``batchmark`` console script runs: it installs the
SIGINT and SIGTERM handlers before the slow imports. ``python -m batchmark.runner.cli`` would install them only
after those imports, so a signal test on it would test something no user runs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from batchmark.runner.cli import main

PROGRAM = ("-m", "batchmark.runner")


def command(*args: str, python: Path | str = sys.executable) -> list[str]:
    """The command line of ``batchmark ARGS`` run by ``python`` (another venv's, say) as the console script runs."""
    return [str(python), *PROGRAM, *args]


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        """stderr as one line (rich may wrap long messages)."""
        return " ".join(self.stderr.split())


def run_program(args: Sequence[str], *, env: Mapping[str, str | None] | None = None, timeout: float = 120) -> Finished:
    """``batchmark ARGS`` as a program of its own, to its end, in this process's environment changed by ``env``
    (None: unset)."""
    environment = {**os.environ, **(env or {})}
    completed = subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={name: value for name, value in environment.items() if value is not None},
        check=False,
    )
    return Finished(completed.returncode, completed.stdout, completed.stderr)


def run_in_process(args: Sequence[str]) -> Finished:
    """``batchmark ARGS`` called in this process (milliseconds where a program takes a second to import)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's own errors
            code = int(exit_.code or 0)
    return Finished(code, stdout.getvalue(), stderr.getvalue())


def read_results(path: Path) -> dict[str, Any]:
    """A results file that ``batchmark run --output`` wrote, JSON or YAML by its name."""
    if path.suffix == ".json":
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def run_and_load(
    output: Path,
    args: Sequence[str],
    *,
    in_process: bool = False,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    """``batchmark run --quiet ARGS --output OUTPUT``, which must exit 0; the results it wrote there.

    As a program of its own unless ``in_process``, where ``env`` and ``timeout`` cannot apply.
    """
    argv = ["run", "--quiet", *args, "--output", str(output)]
    if in_process:
        assert env is None, "an in-process run has this process's environment: monkeypatch it"
        finished = run_in_process(argv)
    else:
        finished = run_program(argv, env=env, timeout=timeout)
    assert finished.code == 0, finished.stderr
    return read_results(output)
