"""An engine over several pods: each pod's place in it from the operator's environment, vLLM's keywords for it,
and how a pod that holds only workers watches the engine (real processes and sockets, no vLLM)."""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest

from batchmark.runner import contract
from batchmark.runner.engines import engine_nodes
from batchmark.runner.engines.engine_nodes import (
    DEFAULT_JOIN_SECONDS,
    EngineNodes,
    EngineNodesError,
    rendezvous_answers,
    serve_engine_node,
)

TEMPLATE = "bb-runner-{member}-0.bb"


def environment(nodes: str, member: str, template: str = TEMPLATE) -> dict[str, str]:
    return {contract.ENV_ENGINE_NODES: nodes, contract.ENV_MEMBER: member, contract.ENV_MEMBER_ADDRESS: template}


def test_each_pod_finds_its_node_rank_and_its_engine_s_node_0() -> None:
    assert EngineNodes.from_environment({}) is None
    assert EngineNodes.from_environment(environment("1", "3")) is None
    assert EngineNodes.from_environment(environment("2", "0")) == EngineNodes(2, 0, "bb-runner-0-0.bb")
    assert EngineNodes.from_environment(environment("2", "5")) == EngineNodes(2, 1, "bb-runner-4-0.bb")
    assert EngineNodes.from_environment(environment("4", "6")) == EngineNodes(4, 2, "bb-runner-4-0.bb")
    for broken, named in (
        (environment("two", "1"), contract.ENV_ENGINE_NODES),
        (environment("2", ""), contract.ENV_MEMBER),
        (environment("2", "1", template="bb-runner-0-0.bb"), contract.ENV_MEMBER_ADDRESS),
        (environment("-2", "1"), contract.ENV_ENGINE_NODES),
    ):
        with pytest.raises(EngineNodesError, match=named):
            EngineNodes.from_environment(broken)


def test_vllm_gets_its_multiprocessing_executor_across_nodes_with_a_join_bound() -> None:
    nodes = EngineNodes(2, 1, "bb-runner-0-0.bb")
    args = nodes.engine_args({"model": "m", "tensor_parallel_size": 2})
    assert args == {
        "model": "m",
        "tensor_parallel_size": 2,
        "distributed_executor_backend": "mp",
        "nnodes": 2,
        "node_rank": 1,
        "master_addr": "bb-runner-0-0.bb",
        "master_port": contract.ENGINE_RENDEZVOUS_PORT,
        "distributed_timeout_seconds": DEFAULT_JOIN_SECONDS,
    }
    assert nodes.engine_args({"distributed_timeout_seconds": 20})["distributed_timeout_seconds"] == 20


def test_the_rendezvous_answers_or_misses() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert rendezvous_answers("127.0.0.1", port)
    assert not rendezvous_answers("127.0.0.1", port)  # refused: nothing listens any more
    assert not rendezvous_answers("no-such-pod.invalid", port)  # its name no longer resolves
    # An address nothing holds answers nothing (TEST-NET-1, never routed): a miss after the timeout.
    assert not rendezvous_answers("192.0.2.1", port, timeout=0.2)


class Rendezvous:
    """A scripted rendezvous: whether it answers at each look, the last one repeated."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self, host: str, port: int) -> bool:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


NODE = EngineNodes(2, 1, "node-0")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_node_s_workers_start_once_node_0_answers_and_stop_once_it_has_gone() -> None:
    # Misses before node 0 answers, then a miss between answers (not gone: one look), then misses for good.
    probe = Rendezvous(False, False, True, True, False, True, False)
    started = time.monotonic()
    outcome = serve_engine_node(NODE, {}, threading.Event(), probe, watch_seconds=0.01, command=SLEEPER, gone_after=0.3)
    assert outcome == engine_nodes.NodeOutcome(0, "node 1 of 2: the engine ended (node-0:29501 stopped answering)")
    assert time.monotonic() - started < 30  # the sleeper was stopped, not waited for
    # Gone only after the misses lasted the bound, not at the third look.
    assert probe.asked > 7 + 3


def test_workers_that_die_end_the_node_with_the_engine_s_failure() -> None:
    dying = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    outcome = serve_engine_node(NODE, {}, threading.Event(), Rendezvous(True), watch_seconds=0.01, command=dying)
    assert outcome.code == contract.EXIT_ENGINE_FAILED
    assert outcome.message == "node 1 of 2: vLLM's workers on this pod ended (killed by SIGKILL) while the engine ran"


def test_a_node_0_that_never_answers_fails_the_node_within_the_join_bound() -> None:
    args = {"distributed_timeout_seconds": 0.2}
    outcome = serve_engine_node(NODE, args, threading.Event(), Rendezvous(False), watch_seconds=0.01, command=SLEEPER)
    assert outcome.code == contract.EXIT_ENGINE_FAILED
    assert outcome.message == (
        "node 1 of 2: the engine's node 0 (node-0:29501) did not open its rendezvous within 0.2 s"
        " (vllm_config.distributed_timeout_seconds)"
    )


def test_a_stop_ends_the_node_and_its_workers() -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    outcome = serve_engine_node(NODE, {}, stop, Rendezvous(True), watch_seconds=0.01, command=SLEEPER)
    assert outcome == engine_nodes.NodeOutcome(0, "node 1 of 2: stopped")
    assert time.monotonic() - started < 30
