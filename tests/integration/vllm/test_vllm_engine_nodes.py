"""One real vLLM engine over two "nodes" (two runner processes of this machine, as two pods of a JobSet run
them: the operator's environment says which node each is): how it fails. A node whose workers never come fails
the run within vLLM's join bound, naming it; a node lost mid-run ends the run at once, and its runner says so.
The engine serving a whole benchmark over two pods is test_vllm_in_a_pod's.

Node 0 (member 2) and node 1 (member 3) of the engine reach each other at 127.0.0.2, member 2's address under the
template (all of 127/8 is this machine's loopback); each rank on a CPU of its own.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner import contract
from batchmark.runner.contract import EXIT_ENGINE_FAILED
from tests.integration.runner.harness import children, cmdline
from tests.integration.vllm.conftest import RunningBatchmark, VllmSetup

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

JOIN_SECONDS = 5


def node_environment(member: int, cpu: int) -> dict[str, str]:
    return {
        contract.ENV_ENGINE_NODES: "2",
        contract.ENV_MEMBER: str(member),
        contract.ENV_MEMBER_ADDRESS: "127.0.0.{member}",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_OMP_THREADS_BIND": str(cpu),
    }


def two_node_run(setup: VllmSetup, **vllm_config: Any) -> dict[str, Any]:
    backend = setup.eager_backend()
    backend["vllm_config"] = {**backend["vllm_config"], "tensor_parallel_size": 2, **vllm_config}
    return {
        "name": "two-nodes",
        "backend": backend,
        "data": {"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": 16},
        "profile": {"kind": "throughput", "max_concurrency": 8},
        "constraints": [{"kind": "max_duration", "seconds": 300}],
    }


def start_node(setup: VllmSetup, config: dict[str, Any], tmp_path: Path, member: int) -> RunningBatchmark:
    workdir = tmp_path / f"member-{member}"
    workdir.mkdir()
    return setup.start_batchmark(config, workdir, (), **node_environment(member, cpu=member % 2))


def test_a_node_that_never_joins_fails_the_run_within_the_join_bound(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    alone = start_node(vllm_setup, two_node_run(vllm_setup, distributed_timeout_seconds=JOIN_SECONDS), tmp_path, 2)
    assert alone.wait(timeout=300) == EXIT_ENGINE_FAILED, alone.stderr()[-6000:]
    stderr = alone.stderr()
    assert "batchmark run: error: the engine failed to load: vllm: RuntimeError:" in stderr
    assert (
        "(the engine spans 2 pods: the others' vLLM workers must join its rendezvous at 127.0.0.2:29501 within"
        f" distributed_timeout_seconds, {JOIN_SECONDS} s)"
    ) in stderr
    report = alone.report()
    assert report is not None
    assert report["complete"] is False


def test_a_node_lost_mid_run_ends_the_run_and_both_runners_say_why(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    config = two_node_run(vllm_setup)
    other = start_node(vllm_setup, config, tmp_path, 3)  # first: it waits for node 0's rendezvous
    other.wait_for("this pod runs its vLLM workers", timeout=120)
    node0 = start_node(vllm_setup, config, tmp_path, 2)
    try:
        node0.wait_for("benchmark 1", timeout=400)
        time.sleep(3)  # a few steps across both nodes
        [workers] = [pid for pid in children(other.process.pid) if "headless_node" in cmdline(pid)]
        os.killpg(workers, signal.SIGKILL)  # the node's vLLM workers, as a node that fails takes them
        assert other.wait(timeout=60) == EXIT_ENGINE_FAILED
        ended = "node 1 of 2: vLLM's workers on this pod ended (killed by SIGKILL) while the engine ran"
        assert ended in other.stderr()
        # Its tensor-parallel peer gone, node 0's engine dies within seconds, and the run ends as an engine death.
        assert node0.wait(timeout=120) == EXIT_ENGINE_FAILED, node0.stderr()[-6000:]
        report = node0.report()
        assert report is not None
        assert report["complete"] is False
    finally:
        for running in (node0, other):
            if running.process.poll() is None:
                os.killpg(running.process.pid, signal.SIGKILL)
                running.process.wait()
