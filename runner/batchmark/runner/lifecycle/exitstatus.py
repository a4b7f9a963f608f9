"""How a process ended, in words, from its exit code as ``multiprocessing.Process.exitcode`` gives it."""

from __future__ import annotations

import signal


def describe_exit(code: int | None) -> str:
    """``exit code 1``, ``killed by SIGKILL`` (a negative code is the signal that ended it), or
    ``exit status unknown`` when the process was reaped elsewhere."""
    if code is None:
        return "exit status unknown"
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"
