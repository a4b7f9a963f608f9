"""The benchmark pod's resources on the real API server: a spec.resources that says nothing of GPUs keeps
vLLM's GPU and toleration, and every benchmark pod asks for CPU and memory."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from batchmark.operator.controller.children import GPU_TOLERATION
from tests.integration.operator.conftest import example, kubectl_apply
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_given_resources_are_merged_and_pods_ask_for_cpu_and_memory(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    vllm = example("simulated-throughput.yaml", name="vllm-memory")
    vllm["spec"]["backend"] = {"model": "Qwen/Qwen3-0.6B", "batchSize": 8}  # engine vllm: one GPU
    vllm["spec"]["resources"] = {"limits": {"memory": "24Gi"}}
    vllm["spec"]["timeout"] = 30  # it cannot run here: only its Job is looked at
    simulated = example("simulated-throughput.yaml", name="simulated-plain")
    del simulated["spec"]["resources"]
    applied = kubectl_apply(cluster, kube_namespace, yaml.safe_dump_all([vllm, simulated]))
    assert applied.returncode == 0, applied.stderr

    def pod_template(name: str) -> dict[str, Any] | None:
        found = cluster.kubectl("get", "job", name, "-n", kube_namespace, "-o", "yaml", check=False)
        template: dict[str, Any] | None = (
            yaml.safe_load(found.stdout)["spec"]["template"]["spec"] if found.returncode == 0 else None
        )
        return template

    pod = wait_for("vllm-memory's Job", lambda: pod_template("vllm-memory"), 60)
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"memory": "24Gi", "nvidia.com/gpu": "1"}
    requests = container["resources"]["requests"]
    assert requests["cpu"] == "2"
    # No memory request added where a limit is given (a pod's request then defaults to its limit).
    assert requests.get("memory", "24Gi") == "24Gi"
    assert GPU_TOLERATION in pod["tolerations"]
    pod = wait_for("simulated-plain's Job", lambda: pod_template("simulated-plain"), 60)
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    # Gone before the namespace is: an operator that starts next must not find them in a terminating namespace.
    cluster.kubectl("delete", "bb", "vllm-memory", "simulated-plain", "-n", kube_namespace, "--wait=true")
