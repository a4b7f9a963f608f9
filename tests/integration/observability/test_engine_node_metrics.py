"""A pod that runs only vLLM's workers of an engine over several pods serves /metrics too (the chart's PodMonitor
scrapes every benchmark pod's metrics port): its series says the pod holds its node of the engine, until it ends."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request

import pytest

from batchmark.runner import contract
from devtools.cluster.controlplane import free_port
from tests.cli import command
from tests.integration.observability.test_linger import wait_for_metric

pytestmark = pytest.mark.integration

JOIN_SECONDS = 4
WORKLOAD = [
    *("--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=8"),
    *("--profile", "kind=throughput", "--constraint", "kind=max_requests,count=8"),
]


def test_a_workers_only_pod_serves_its_metrics_while_it_waits_for_the_engine_and_ends_with_it() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    # Node 1 of 2: it waits for node 0's rendezvous (here never opened) up to the engine's join bound.
    backend = f"kind=vllm_python_batch,model=m,engine=vllm,vllm_config.distributed_timeout_seconds={JOIN_SECONDS}"
    environment = {
        contract.ENV_ENGINE_NODES: "2",
        contract.ENV_MEMBER: "1",
        contract.ENV_MEMBER_ADDRESS: "127.0.0.{member}",
    }
    process = subprocess.Popen(
        command("run", "--quiet", "--name", "nodes", "--backend", backend, *WORKLOAD, "--metrics-port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **environment},
    )
    try:
        wait_for_metric(url, 'batchmark_engine_node_workers{benchmark="nodes",node="1"} 1.0', process)
        _, stderr = process.communicate(timeout=JOIN_SECONDS + 30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == contract.EXIT_ENGINE_FAILED, stderr
    assert f"serving metrics on {url}" in stderr
    assert "node 1 of 2: the engine's node 0 (127.0.0.0:" in stderr, stderr
    assert f"did not open its rendezvous within {JOIN_SECONDS} s" in stderr, stderr
    with pytest.raises(urllib.error.URLError, match="Connection refused"):  # the server ends with the pod's run
        urllib.request.urlopen(url, timeout=2)
