"""The node agent as a kubelet about CPU: a container's CPU request sets its weight against the node's own
processes (a niceness standing in for the cgroup's cpu.shares), and what it forks inherits it."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.cluster.controlplane import GPU_TOLERATION
from tests.cluster.fixtures import KubeCluster
from tests.cluster.nodeagent import cpu_niceness
from tests.polling import wait_for

# Prints the niceness of the container's first process and of a process it forks.
REPORT_NICENESS = """
import os, subprocess, sys
print(os.nice(0), flush=True)
subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], check=True)
"""


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
        assert logs == [expected, expected], (name, logs)
