"""Waiting in tests for something a real component does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

Result = TypeVar("Result")


def wait_for(
    what: str, probe: Callable[[], Result | None], timeout_seconds: float = 90, period_seconds: float = 0.2
) -> Result:
    """Poll until probe returns something other than None (or False), and return that."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result = probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_seconds} s waiting for {what}")
        time.sleep(period_seconds)
