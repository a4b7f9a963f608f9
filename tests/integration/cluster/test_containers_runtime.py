"""Benchmarks as a user's cluster runs them: the operator's Job on a real kubelet over containerd, in the runner
image built from the Dockerfile, with the operator's securityContext (devtools/cluster, runtime="containers")."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api

from batchmark.runner.contract import RUNNER_GID, RUNNER_UID
from devtools.cluster import images
from devtools.cluster.controlplane import GPU_TOLERATION, locate_runtime_binaries
from devtools.cluster.ociarchive import write_image_archive
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import (
    WRITES,
    apply_watched_benchmark,
    assert_succeeds_with_results,
    assert_writes_home_and_caches,
    pod_of,
    running_pod,
)
from tests.integration.cluster.containers import container_process, ids
from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.polling import CLUSTER_PATIENCE_SECONDS, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

# OpenShift's restricted policy runs a pod as a UID from the namespace's range, with GID 0.
ARBITRARY_UID = 1000640000


def test_the_operator_runs_from_its_image_installed_by_helm(
    operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace = operator.cluster, container_namespace
    pod = operator.pod()
    assert pod["spec"]["nodeName"] == "cpu-node-0"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == images.chart_image("operator")
    # `batchmark operator` runs in a container of the operator image, as the image's user.
    pid = wait_for("the operator's process", lambda: container_process(pod["metadata"]["uid"], "operator"), 30)
    root = Path(f"/proc/{pid}/root")
    assert os.stat(root).st_ino != os.stat("/").st_ino or os.stat(root).st_dev != os.stat("/").st_dev
    assert (root / "opt" / "batchmark" / "bin" / "batchmark").exists()
    assert ids(pid) == ([RUNNER_UID] * 4, [RUNNER_GID] * 4)

    # It runs a benchmark, reaching the API server from its pod as in-cluster clients do, in the chart's default
    # runner image.
    manifest = example("simulated-throughput.yaml", name="by-the-chart")
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 60}]
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump(manifest))
    assert applied.returncode == 0, applied.stderr
    try:
        status = wait_for_phase(cluster, namespace, "by-the-chart", {"Succeeded", "Failed"}, 180)["status"]
    except AssertionError:
        raise AssertionError(f"the chart's operator:{operator.describe()}") from None
    assert status["phase"] == "Succeeded", status
    job = json.loads(cluster.kubectl("get", "job", "by-the-chart", "-n", namespace, "-o", "json").stdout)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == images.chart_image("runner")


def test_the_operators_job_runs_the_benchmark_in_the_runner_image_as_its_user(
    operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace, name = operator.cluster, container_namespace, "in-a-container"
    apply_watched_benchmark(cluster, namespace, name, seconds=25, image=images.TAGS["runner"])
    pod = running_pod(cluster, namespace, name)

    # `batchmark run` is a process in a container: the image's file system is its root, the pod's user its user.
    pid = wait_for(
        "the runner's process", lambda: container_process(pod.metadata.uid, "run", "--config"), CLUSTER_PATIENCE_SECONDS
    )
    root = Path(f"/proc/{pid}/root")
    assert os.stat(root).st_ino != os.stat("/").st_ino or os.stat(root).st_dev != os.stat("/").st_dev
    assert (root / "opt" / "batchmark" / "bin" / "batchmark").exists()
    assert ids(pid) == ([RUNNER_UID] * 4, [RUNNER_GID] * 4)

    # Its metrics at the pod's own address, where a PodMonitor's target points.
    pod_ip = wait_for("the pod's address", lambda: pod_of(cluster, namespace, name).status.pod_ip, 30)
    with urllib.request.urlopen(f"http://{pod_ip}:8000/metrics", timeout=10) as answer:
        assert "batchmark_" in answer.read().decode()

    assert_writes_home_and_caches(cluster, namespace, pod)
    assert_succeeds_with_results(cluster, namespace, name)


def test_the_runner_image_runs_a_benchmark_under_an_arbitrary_uid_with_gid_0(
    container_cluster: KubeCluster, container_namespace: str
) -> None:
    run_benchmark = (
        "batchmark run --quiet --name arbitrary-uid"
        " --backend kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=0"
        " --data kind=synthetic_text,prompt_tokens=64,output_tokens=16"
        " --profile kind=throughput,max_concurrency=16 --constraint kind=max_requests,count=40"
        " --output results.json >run.log 2>&1 || { cat run.log; exit 1; }"
    )
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "arbitrary-uid"},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [GPU_TOLERATION],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": ARBITRARY_UID,
                "runAsGroup": 0,
                "fsGroup": ARBITRARY_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "runner",
                    "image": images.TAGS["runner"],
                    "command": ["sh", "-c", f"{WRITES}; {run_benchmark}; id -u; id -g; stat -c %u:%g results.json"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    applied = kubectl_apply(container_cluster, container_namespace, json.dumps(pod))
    assert applied.returncode == 0, applied.stderr
    container_cluster.wait(
        "--for=jsonpath={.status.phase}=Succeeded", "pod/arbitrary-uid", "-n", container_namespace, timeout_seconds=180
    )
    logs = container_cluster.kubectl("logs", "-n", container_namespace, "arbitrary-uid").stdout.split()
    assert logs == ["written", str(ARBITRARY_UID), "0", f"{ARBITRARY_UID}:0"]


def short_benchmark(name: str, **spec: Any) -> dict[str, Any]:
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["image"] = images.TAGS["runner"]
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 60}]
    manifest["spec"].update(spec)
    return manifest


def events_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    listed = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    return [
        {"type": event["type"], "reason": event["reason"], "message": event["message"]}
        for event in json.loads(listed.stdout)["items"]
    ]


def test_a_memory_limit_below_the_runners_needs_is_oomkilled_by_the_kernel(
    operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace = operator.cluster, container_namespace
    # The kernel first reclaims the image's file pages the runner maps, so it crawls on before the OOM killer
    # ends it: seen to take over 120 s at a load average of 15.
    starved = short_benchmark("starved", resources={"limits": {"nvidia.com/gpu": 1, "memory": "64Mi"}})
    assert kubectl_apply(cluster, namespace, yaml.safe_dump(starved)).returncode == 0
    status = wait_for_phase(cluster, namespace, "starved", {"Failed", "Succeeded"}, 300)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "OOMKilled"), status
    assert status["message"] == "the runner ran out of memory (raise spec.resources.limits.memory)"
    pod = CoreV1Api(cluster.api_client()).read_namespaced_pod(status["podName"], namespace)
    terminated = pod.status.container_statuses[0].state.terminated  # type: ignore[index,union-attr]
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)  # type: ignore[union-attr]
    expected = {"type": "Warning", "reason": "Failed", "message": f"OOMKilled: {status['message']}"}
    assert expected in events_of(cluster, namespace, "starved")


def test_an_image_no_registry_serves_backs_off_in_scheduling_until_its_timeout(
    operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace = operator.cluster, container_namespace
    # Nothing listens on port 9 of this machine: containerd's pull fails at once, and no traffic leaves.
    image = "127.0.0.1:9/batchmark/batchmark-runner:missing"
    # The kubelet reports ErrImagePull first and ImagePullBackOff only on its next sync of the pod, 10-15 s later
    # (seen 14 s after the first pull on a quiet machine); a loaded one can take tens of seconds more to start the
    # pod, and the timeout runs from the Job's start.
    manifest = short_benchmark("unpullable", image=image, timeout=90)
    assert kubectl_apply(cluster, namespace, yaml.safe_dump(manifest)).returncode == 0

    def backing_off() -> dict[str, Any] | None:
        status: dict[str, Any] = benchmark(cluster, namespace, "unpullable").get("status") or {}
        assert status.get("phase") not in {"Failed", "Succeeded"}, f"finished before it backed off: {status}"
        return status if status.get("reason") == "ImagePullBackOff" else None

    status = wait_for("ImagePullBackOff", backing_off, 120)
    assert status["phase"] == "Scheduling"
    assert status["message"].startswith(f'Back-off pulling image "{image}"'), status["message"]
    assert any(
        event["type"] == "Warning" and event["reason"] == "ImagePullBackOff"
        for event in events_of(cluster, namespace, "unpullable")
    )
    status = wait_for_phase(cluster, namespace, "unpullable", {"Failed", "Succeeded"}, 120)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded"), status


def run_pod(cluster: KubeCluster, namespace: str, name: str, image: str, command: list[str], **spec: Any) -> None:
    container: dict[str, Any] = {"name": "main", "image": image, "command": command}
    container.update(spec.pop("container", {}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }
    applied = kubectl_apply(cluster, namespace, json.dumps(pod))
    assert applied.returncode == 0, applied.stderr


def test_run_as_non_root_refuses_an_image_whose_user_is_root(
    container_cluster: KubeCluster, container_namespace: str, tmp_path: Path
) -> None:
    image = "localhost/batchmark-root:test"
    archive = tmp_path / "root.tar"
    pause = locate_runtime_binaries().pause
    write_image_archive(archive, image, {"/pause": (pause, 0o755)}, ["/pause"])  # no USER: root
    container_cluster.load_images([archive])
    run_pod(
        container_cluster,
        container_namespace,
        "as-root",
        image,
        ["/pause", "-v"],
        securityContext={"runAsNonRoot": True},
    )

    def refused() -> Any:
        pod = CoreV1Api(container_cluster.api_client()).read_namespaced_pod("as-root", container_namespace)
        statuses = pod.status.container_statuses or []  # type: ignore[union-attr]
        waiting = statuses[0].state.waiting if statuses else None  # type: ignore[union-attr]
        return waiting if waiting is not None and waiting.reason == "CreateContainerConfigError" else None

    waiting = wait_for("the kubelet's refusal", refused, CLUSTER_PATIENCE_SECONDS)
    assert "container has runAsNonRoot and image will run as root" in waiting.message


def test_a_read_only_root_file_system_takes_writes_only_in_volumes(
    container_cluster: KubeCluster, container_namespace: str
) -> None:
    script = 'touch /scratch/written && echo volume-written; touch "$HOME/written" 2>&1 || echo home-refused'
    run_pod(
        container_cluster,
        container_namespace,
        "read-only",
        images.TAGS["runner"],
        ["sh", "-c", script],
        container={
            "securityContext": {"readOnlyRootFilesystem": True},
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        },
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    container_cluster.wait(
        "--for=jsonpath={.status.phase}=Succeeded", "pod/read-only", "-n", container_namespace, timeout_seconds=120
    )
    logs = container_cluster.kubectl("logs", "-n", container_namespace, "read-only").stdout
    assert logs.splitlines()[0] == "volume-written"
    assert "Read-only file system" in logs
    assert logs.splitlines()[-1] == "home-refused"
