"""The node agent as a kubelet about CPU: a container's CPU request sets its weight against the node's own
processes (a niceness standing in for the cgroup's cpu.shares, also on its session's autogroup, which the
kernel weighs first), and what it forks inherits it."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import GPU_TOLERATION
from tests.cluster.fixtures import KubeCluster, node_agent_cluster
from tests.cluster.nodeagent import autogroups_on, cpu_niceness, set_autogroup_niceness
from tests.polling import wait_for

# Prints the niceness of the container's first process and of a process it forks, and the niceness of their
# session's autogroup where the kernel has autogroups on ("off" where not).
REPORT_NICENESS = """
import os, pathlib, subprocess, sys
switch = pathlib.Path("/proc/sys/kernel/sched_autogroup_enabled")
on = switch.exists() and switch.read_text().strip() == "1"
print(pathlib.Path("/proc/self/autogroup").read_text().split()[-1] if on else "off", flush=True)
print(os.nice(0), flush=True)
subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], check=True)
"""


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """These tests are the node agent's (pods as processes of this machine, their files in this test's folders):
    a control plane of their own on it, in place of the session's on real kubelets."""
    yield from node_agent_cluster(tmp_path_factory.mktemp("agent-cluster"))


def test_the_niceness_follows_the_cpu_shares_a_kubelet_sets() -> None:
    def requesting(cpu: str | None) -> dict[str, Any]:
        return {"resources": {"requests": {"cpu": cpu}}} if cpu else {"resources": {"limits": {"nvidia.com/gpu": 1}}}

    # No request: the kubelet's 2 shares, the least weight there is.
    assert cpu_niceness(requesting(None)) == 19
    assert cpu_niceness({}) == 19
    assert cpu_niceness(requesting("10m")) == 19  # 10 shares: still below niceness 19's weight of 15
    assert cpu_niceness(requesting("100m")) == 10  # 102 shares
    assert cpu_niceness(requesting("500m")) == 3  # 512 shares
    assert cpu_niceness(requesting("1")) == 0
    assert cpu_niceness(requesting("4")) == 0  # never above the node's own processes


@pytest.mark.cluster
def test_a_pod_runs_with_the_weight_of_its_cpu_request(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    requests = {"best-effort": None, "half-a-core": "500m", "one-core": "1"}
    for name, cpu in requests.items():
        container: dict[str, Any] = {
            "name": "main",
            "image": "batchmark-runner:test",
            "command": ["python", "-c", REPORT_NICENESS],
        }
        if cpu:
            container["resources"] = {"requests": {"cpu": cpu}}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "containers": [container]},
        }
        kube_cluster.request("POST", f"/api/v1/namespaces/{kube_namespace}/pods", pod)

    def succeeded(name: str) -> bool:
        pod = kube_cluster.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods/{name}")
        assert pod["status"].get("phase") != "Failed", pod["status"]
        return bool(pod["status"].get("phase") == "Succeeded")

    for name, expected in {"best-effort": "19", "half-a-core": "3", "one-core": "0"}.items():
        wait_for(f"pod {name} to succeed", functools.partial(succeeded, name))
        logs = kube_cluster.kubectl("logs", "-n", kube_namespace, name).stdout.split()
        autogroup = expected if autogroups_on() else "off"
        assert logs == [autogroup, expected, expected], (name, logs)


def test_a_niced_session_yields_the_cpu_to_other_sessions() -> None:
    """With autogroups on, niceness weighs only within a session; the agent's containers run in sessions of
    their own, so their session's autogroup must carry the weight too."""
    if not autogroups_on():
        pytest.skip("the kernel has no autogroups here: niceness alone already weighs across sessions")
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        set_autogroup_niceness(process.pid, 19)
        assert Path(f"/proc/{process.pid}/autogroup").read_text().split()[-2:] == ["nice", "19"]
        assert Path("/proc/self/autogroup").read_text().split()[-2:] != ["nice", "19"]  # ours is untouched
    finally:
        process.kill()
        process.wait()
