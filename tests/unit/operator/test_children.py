"""The objects a BatchBenchmark owns: names, owner references, the pod spec and the runner's Role."""

from __future__ import annotations

from typing import Any

import pytest

from batchmark.operator.controller import children
from batchmark.operator.resource.api import DEFAULT_CPU_IMAGE, BatchBenchmarkSpec, OperatorDefaults
from batchmark.runner import contract

OWNER = children.Owner("team", "qwen3", "0b3c9d2e-51aa-4c1f-9e0a-7d2f8c6b1a90")
BENCHMARK: dict[str, Any] = {
    "backend": {"model": "Qwen/Qwen3-0.6B", "batchSize": 8},
    "data": {"promptTokens": 16, "outputTokens": 8},
    "profile": {"kind": "throughput"},
    "constraints": [{"kind": "max_requests", "count": 10}],
}


def spec(**changes: Any) -> BatchBenchmarkSpec:
    return BatchBenchmarkSpec.model_validate({**BENCHMARK, **changes})


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_every_child_is_owned_and_labelled() -> None:
    config = spec().run_config("qwen3")
    for manifest in (
        children.config_map(OWNER, config),
        children.service_account(OWNER),
        children.role(OWNER),
        children.role_binding(OWNER),
        children.job(OWNER, spec()),
    ):
        metadata = manifest["metadata"]
        assert metadata["namespace"] == "team"
        assert metadata["ownerReferences"] == [
            {
                "apiVersion": "batchmark.dev/v1alpha1",
                "kind": "BatchBenchmark",
                "name": "qwen3",
                "uid": OWNER.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert metadata["labels"]["batchmark.dev/benchmark"] == "qwen3"
    names = {children.job(OWNER, spec())["metadata"]["name"], OWNER.config_map, OWNER.runner}
    # The Job is named as its benchmark (kube.create checks whose a Job of that name is); the others carry part
    # of the uid: a benchmark applied just after one of the same name was deleted never takes the old ones.
    assert names == {"qwen3", "qwen3-config-0b3c9d2e51", "qwen3-runner-0b3c9d2e51"}
    assert children.Owner("team", "qwen3", "1f00aa00-0000-4000-8000-000000000000").runner != OWNER.runner


def test_the_runner_may_touch_only_its_own_status_and_create_its_results() -> None:
    rules = children.role(OWNER)["rules"]
    assert rules == [
        {
            "apiGroups": ["batchmark.dev"],
            "resources": ["batchbenchmarks/status"],
            "resourceNames": ["qwen3"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]


def test_the_pod_spec() -> None:
    job = children.job(OWNER, spec(retries=2, timeout=600, ttlSecondsAfterFinished=60))
    assert job["spec"]["backoffLimit"] == 2
    # Retries are for what may go otherwise next time: not a refused configuration, nor a failed results store.
    assert job["spec"]["podFailurePolicy"] == {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": "runner",
                    "operator": "In",
                    "values": [contract.EXIT_USAGE, contract.EXIT_OUTPUT_FAILED],
                },
            }
        ]
    }
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["ttlSecondsAfterFinished"] == 60
    pod = pod_spec(job)
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "batchmark",
        "app.kubernetes.io/component": "benchmark",
        "batchmark.dev/benchmark": "qwen3",
    }
    assert pod["serviceAccountName"] == "qwen3-runner-0b3c9d2e51"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["command"][:4] == ["batchmark", "run", "--config", contract.CONFIG_PATH]
    assert container["command"][-6:] == [
        "--metrics-address", "0.0.0.0", "--metrics-port", "8000", "--metrics-linger", "15.0"
    ]  # fmt: skip
    assert container["ports"] == [{"name": "metrics", "containerPort": 8000, "protocol": "TCP"}]
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}
    assert env[contract.ENV_NAME] == "qwen3"
    assert env[contract.ENV_UID] == OWNER.uid
    assert env[contract.ENV_TERMINATION] == container["terminationMessagePath"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    # vLLM with no resources: one GPU and the GPU taint tolerated, and CPU and memory requests.
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2", "memory": "8Gi"}}
    assert children.GPU_TOLERATION in pod["tolerations"]


def test_gpus_follow_tensor_and_pipeline_parallelism() -> None:
    backend = {**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}}
    container = pod_spec(children.job(OWNER, spec(backend=backend)))["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        children.job(OWNER, spec(backend={**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": "two"}}))


def test_engine_replicas_in_one_pod_ask_for_each_replicas_gpus() -> None:
    backend = {**BENCHMARK["backend"], "replicas": 4, "vllmConfig": {"tensor_parallel_size": 2}}
    container = pod_spec(children.job(OWNER, spec(backend=backend)))["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_simulated_engine_asks_for_no_gpu_and_the_metrics_port_is_declared() -> None:
    backend = {**BENCHMARK["backend"], "engine": "simulated"}
    pod = pod_spec(children.job(OWNER, spec(backend=backend, metrics={"port": 9100})))
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    assert "tolerations" not in pod
    assert pod["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    command = pod["containers"][0]["command"]
    assert command[command.index("--metrics-port") + 1] == "9100"


def test_metrics_port_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="metrics"):
        spec(metrics={"port": 0})


@pytest.mark.parametrize(("linger", "argument"), [(0, "0.0"), (2.5, "2.5"), (60, "60.0"), (3600, "3600.0")])
def test_the_metrics_linger_of_the_spec_is_the_runners(linger: float, argument: str) -> None:
    command = pod_spec(children.job(OWNER, spec(metrics={"lingerSeconds": linger})))["containers"][0]["command"]
    assert command[command.index("--metrics-linger") + 1] == argument


def test_without_metrics_there_is_nothing_to_linger_for() -> None:
    command = pod_spec(children.job(OWNER, spec(metrics={"enabled": False, "lingerSeconds": 30})))["containers"][0]
    assert not {"--metrics-port", "--metrics-linger"} & set(command["command"])


@pytest.mark.parametrize("linger", [-1, 3601, float("nan"), float("inf"), "15s"])
def test_a_metrics_linger_outside_0_to_an_hour_is_refused(linger: object) -> None:
    with pytest.raises(ValueError, match=r"metrics\.lingerSeconds"):
        spec(metrics={"lingerSeconds": linger})


def test_model_cache_and_token_and_operator_defaults() -> None:
    defaults = OperatorDefaults.model_validate(
        {"image": "registry.example/runner:1", "modelCache": {"claimName": "models"}, "hfTokenSecret": {"name": "hf"}}
    )
    resolved = defaults.apply(spec(image=None))
    pod = pod_spec(children.job(OWNER, resolved))
    container = pod["containers"][0]
    assert container["image"] == "registry.example/runner:1"
    assert {"name": "HF_HOME", "value": "/models"} in container["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in container["env"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    # The spec wins where it says something.
    assert defaults.apply(spec(image="mine:2")).image == "mine:2"


def test_operator_defaults_forbid_unknown_keys() -> None:
    with pytest.raises(ValueError, match="bogus"):
        OperatorDefaults.model_validate({"bogus": 1})


def test_a_data_volume_from_a_config_map_or_a_claim_is_mounted_read_only() -> None:
    data = {"kind": "file", "path": "/data/prompts.jsonl"}
    pod = pod_spec(children.job(OWNER, spec(data=data, dataVolume={"configMap": "prompts"})))
    assert {"name": "data", "configMap": {"name": "prompts"}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    # A relative data.path is read from under the mount.
    assert {"name": "BATCHMARK_DATA_DIR", "value": "/data"} in pod["containers"][0]["env"]
    pod = pod_spec(children.job(OWNER, spec(data=data, dataVolume={"claimName": "corpus", "mountPath": "/corpus"})))
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "corpus", "readOnly": True}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/corpus", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    for both_or_neither in ({"configMap": "a", "claimName": "b"}, {}):
        with pytest.raises(ValueError, match="one of configMap or claimName"):
            spec(data=data, dataVolume=both_or_neither)


def test_given_resources_are_merged_with_the_engines_needs() -> None:
    """A spec.resources that says nothing of GPUs keeps vLLM's GPU and its toleration; what it gives wins."""
    memory_only = pod_spec(children.job(OWNER, spec(resources={"limits": {"memory": "32Gi"}})))
    (container,) = memory_only["containers"]
    assert container["resources"] == {"limits": {"memory": "32Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "2"}}
    assert children.GPU_TOLERATION in memory_only["tolerations"]
    no_gpu = pod_spec(children.job(OWNER, spec(resources={"limits": {"nvidia.com/gpu": 0}, "requests": {"cpu": 8}})))
    (container,) = no_gpu["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "0"}, "requests": {"cpu": "8", "memory": "8Gi"}}
    assert "tolerations" not in no_gpu
    chosen = pod_spec(children.job(OWNER, spec(resources={"limits": {"memory": "1Gi"}}, tolerations=[])))
    assert "tolerations" not in chosen  # an empty list given is the spec's choice


def test_a_benchmark_on_cpu_asks_for_no_gpu_and_runs_the_cpu_runner_image() -> None:
    limits = {"cpu": "2", "memory": "6Gi"}
    (container,) = pod_spec(children.job(OWNER, spec(device="cpu", resources={"limits": limits})))["containers"]
    assert container["resources"] == {"limits": limits}
    assert container["image"] == DEFAULT_CPU_IMAGE
    pod = pod_spec(children.job(OWNER, spec(device="cpu")))
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "8Gi"}}
    assert "tolerations" not in pod
    # A GPU cluster's defaults (GPUs for every benchmark, its runner image) leave a benchmark on cpu without GPUs.
    gpu_defaults = OperatorDefaults.model_validate(
        {"image": "mirror/batchmark-runner:1", "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}}}
    )
    on_cpu = gpu_defaults.apply(spec(device="cpu"))
    (container,) = pod_spec(children.job(OWNER, on_cpu))["containers"]
    assert container["resources"] == {"limits": {"memory": "64Gi"}, "requests": {"cpu": "2"}}
    assert container["image"] == DEFAULT_CPU_IMAGE
    assert gpu_defaults.apply(spec()).image == "mirror/batchmark-runner:1"
    # A CPU cluster's defaults: every benchmark on cpu, in its mirror's CPU runner image, unless one says gpu.
    cpu_defaults = OperatorDefaults.model_validate({"device": "cpu", "cpuImage": "mirror/batchmark-runner-cpu:1"})
    assert (cpu_defaults.apply(spec()).device, cpu_defaults.apply(spec()).image) == (
        "cpu",
        "mirror/batchmark-runner-cpu:1",
    )
    assert cpu_defaults.apply(spec(device="gpu")).image is None  # the operator's runner image, DEFAULT_IMAGE
    assert cpu_defaults.apply(spec(device="cpu", image="mine:1")).image == "mine:1"


@pytest.mark.parametrize("kind", ["limits", "requests"])
def test_a_benchmark_on_cpu_that_asks_for_gpus_is_refused(kind: str) -> None:
    with pytest.raises(ValueError, match=f"device is cpu but resources.{kind} asks for nvidia.com/gpu"):
        spec(device="cpu", resources={kind: {"nvidia.com/gpu": 1}})
    assert spec(device="cpu", resources={kind: {"nvidia.com/gpu": 0}}).device == "cpu"
