"""Engine replicas on the real engine: two vLLM engines in one run, each in its own process group on its own
share of the CPUs (vLLM's compute threads bound to it), both serving real tokens, aggregated."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from batchmark.runner.dispatch.process_group import engine_processes
from tests.integration.process_tree import descendants
from tests.integration.vllm.conftest import RUN_TIMEOUT, VllmSetup

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

OUTPUT_TOKENS = 16
REQUESTS = 96


def _engine_cpus_while_running(main_pid: int, timeout: float) -> dict[int, frozenset[int]]:
    """Once both engines' processes run: each vLLM process's CPUs, by its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        below = descendants(main_pid)
        ours = [process for process in engine_processes() if process.pid in below]
        if sum(process.title.startswith("VLLM::EngineCore") for process in ours) == 2:
            try:
                return {process.pid: frozenset(os.sched_getaffinity(process.pid)) for process in ours}
            except OSError:
                pass  # one ended meanwhile: the run is over, and the assertion below says so
        time.sleep(0.2)
    raise AssertionError(f"two engine cores never ran within {timeout} s")


def test_two_real_engines_on_their_own_cpus_serve_one_run(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert len(allowed) >= 2, "two replicas on a CPU need two CPUs"
    share = len(allowed) // 2
    expected = [allowed[:share], allowed[share : 2 * share]]
    config = {
        "name": "vllm-replicas",
        # Eager: this tests where the engines run and what they serve, not vLLM's compiled compute path.
        "backend": vllm_setup.eager_backend(replicas=2),
        "data": {"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
    }
    run = vllm_setup.start_batchmark(config, tmp_path, VLLM_LOGGING_STREAM="ext://sys.stderr")
    try:
        placed = _engine_cpus_while_running(run.process.pid, RUN_TIMEOUT)
        assert run.wait(RUN_TIMEOUT) == 0, run.stderr()[-6000:]
    finally:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
    # Every vLLM process of the run is kept to one replica's share, and both shares are used.
    assert set(placed.values()) == {frozenset(cpus) for cpus in expected}, placed
    # vLLM's own account of its compute threads' binding, once per engine: each on its replica's CPUs.
    bindings = re.findall(r"local_rank=0, core ids=\[([0-9, ]*)\]", run.stderr())
    assert sorted(sorted(int(cpu) for cpu in found.split(",")) for found in bindings) == sorted(expected)
    report = run.report()
    assert report is not None
    assert report["complete"] is True
    assert report["engine"]["simulated"] is False
    assert report["engine"]["replicas"] == 2
    devices = [f"CPUs {','.join(map(str, cpus))}" for cpus in expected]
    assert report["engine"]["replica_devices"] == devices
    [benchmark] = report["benchmarks"]
    replicas = benchmark["replicas"]
    assert [replica["devices"] for replica in replicas] == devices
    assert all(replica["requests"]["completed"] > 0 for replica in replicas)
    assert sum(replica["requests"]["completed"] for replica in replicas) == REQUESTS
    # Real tokens from both engines: every request generated exactly its output length.
    assert benchmark["tokens"]["output"] == REQUESTS * OUTPUT_TOKENS
    assert sum(replica["tokens"]["output"] for replica in replicas) == REQUESTS * OUTPUT_TOKENS
    summed = sum(replica["throughput"]["output_tokens_per_second"] for replica in replicas)
    assert benchmark["throughput"]["output_tokens_per_second"] == pytest.approx(summed, rel=1e-6)
    assert benchmark["replica_summary"]["count"] == 2
