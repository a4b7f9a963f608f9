"""Waiting in tests for something a real component does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

Result = TypeVar("Result")

# How long a test waits for a kubelet or a controller to act on its pods (start them, end them, admit or finish
# their Jobs) where the acting, not its speed, is what the test asserts. What takes seconds on a free machine took
# over a minute in CI, where vLLM holds both cores and the demo puts an engine's 7 GB image onto its node beside
# the session's cluster (writes that stall other processes' writes). Kubernetes' own end-to-end tests give
# a pod five minutes to start (framework.PodStartTimeout) for the same reason. A longer wait lets no wrong outcome
# pass, only a slow right one: every such test waits for an end its subject would otherwise never reach in time
# (a pod that sleeps ten minutes, a queue that never drains).
CLUSTER_PATIENCE_SECONDS = 300


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
