"""End to end on the real control plane: the operator (a real process, real kopf) runs BatchBenchmarks as Jobs
whose pods real kubelets run on fake GPU nodes, in the runner image; the runner in them writes the status."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from prometheus_client.parser import text_string_to_metric_families

from batchmark.runner.observe.statuswriter import read_report_config_map
from batchmark.runner.results.outputs import load_report
from batchmark.runner.results.summary import run_summary
from tests.cli import run_program
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def apply(cluster: KubeCluster, namespace: str, manifest: dict[str, Any]) -> None:
    result = kubectl_apply(cluster, namespace, yaml.safe_dump(manifest))
    assert result.returncode == 0, result.stderr


def results_report(cluster: KubeCluster, namespace: str, name: str) -> Any:
    """The full report in the ConfigMap the runner created and named in the status; None without one."""
    config_map_name = (benchmark(cluster, namespace, name).get("status") or {}).get("resultsConfigMap")
    if config_map_name is None:
        return None
    config_map = CoreV1Api(cluster.api_client()).read_namespaced_config_map(config_map_name, namespace)
    return read_report_config_map(config_map.to_dict())


def short_run(name: str, seconds: float | None = None, requests: int = 60, **spec: Any) -> dict[str, Any]:
    """The simulated example, made short (or bounded by seconds, for tests that act while it runs)."""
    manifest = example("simulated-throughput.yaml", name=name)
    if seconds is not None:
        manifest["spec"]["constraints"] = [{"kind": "max_duration", "seconds": seconds}]
        manifest["spec"]["profile"] = {"kind": "constant", "rate": 20}
    else:
        manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": requests}]
    manifest["spec"].update(spec)
    return manifest


def test_lifecycle_columns_wait_events_and_results(
    batchmark_operator: InstalledOperator, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    watcher = subprocess.Popen(
        [
            *(str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", "-n", kube_namespace, "get", "bb"),
            *("-w", "-o", "jsonpath={.status.phase}{'\\n'}"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1)
        apply(cluster, kube_namespace, example("simulated-throughput.yaml"))
        waited = cluster.kubectl(
            "wait", "--for=condition=Complete", "bb/simulated-throughput", "-n", kube_namespace, "--timeout=180s"
        )
        assert "condition met" in waited.stdout
        time.sleep(1)
    finally:
        watcher.terminate()
        output, _ = watcher.communicate(timeout=10)
    phases = [line for line in dict.fromkeys(output.split()) if line]
    assert phases == ["Pending", "Scheduling", "LoadingEngine", "Running", "Succeeded"]

    found = benchmark(cluster, kube_namespace, "simulated-throughput")
    status = found["status"]
    assert status["attempts"] == 1
    assert status["nodeName"].startswith("gpu-node-")  # it asked for a GPU
    assert status["jobName"] == "simulated-throughput"
    assert status["engine"]["simulated"] is True
    conditions = {condition["type"]: condition["status"] for condition in status["conditions"]}
    assert conditions == {
        "Scheduled": "True",
        "EngineLoaded": "True",
        "Complete": "True",
        "Failed": "False",
        "Retrying": "False",
    }

    # status.results are the full report's figures, compacted.
    report = results_report(cluster, kube_namespace, "simulated-throughput")
    assert report is not None
    expected = [
        entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in run_summary(report).results
    ]
    assert status["results"] == expected
    assert status["runId"] == report.run_id

    assert_columns_show_the_headline(cluster, kube_namespace, status)

    events = json.loads(
        cluster.kubectl(
            "get",
            "events",
            "-n",
            kube_namespace,
            "--field-selector",
            "involvedObject.name=simulated-throughput",
            "-o",
            "json",
        ).stdout
    )
    reasons = {event["reason"] for event in events["items"] if event["involvedObject"]["kind"] == "BatchBenchmark"}
    assert {"Scheduled", "EngineLoaded", "Running", "Completed"} <= reasons

    # `batchmark results` writes what `batchmark run --output` would; its figures equal the status's.
    report_path = tmp_path / "report.json"
    fetched = run_program(
        ["results", "simulated-throughput", "-n", kube_namespace, "-o", str(report_path)],
        env={"KUBECONFIG": str(cluster.kubeconfig)},
        timeout=60,
    )
    assert fetched.code == 0, fetched.stderr
    written = load_report(report_path)
    assert written == report
    summary = run_summary(written).results[0]
    assert summary.output_tokens_per_second == status["results"][0]["outputTokensPerSecond"]

    # The operator's /metrics: the result gauges, by phase, reconciles.
    metrics = batchmark_operator.metrics()
    assert (
        f'batchmark_result_output_tokens_per_second{{batch_size="16",engine="simulated",model="Qwen/Qwen3-0.6B",name="simulated-throughput",namespace="{kube_namespace}"'
        in metrics
    )
    assert 'batchmark_operator_reconciles_total{outcome="success"}' in metrics
    assert "batchmark_operator_reconcile_duration_seconds_bucket" in metrics
    assert re.search(r'batchmark_operator_benchmarks\{phase="Succeeded"\} [1-9]', metrics)

    # Deleting the resource removes what it owns, and its series.
    cluster.kubectl("delete", "bb", "simulated-throughput", "-n", kube_namespace, "--wait=true")
    wait_for("the Job to be collected", lambda: _job_gone(cluster, kube_namespace, "simulated-throughput"), 60)
    wait_for(
        "the result series to go",
        lambda: f'name="simulated-throughput",namespace="{kube_namespace}"' not in batchmark_operator.metrics(),
        30,
    )


def assert_columns_show_the_headline(cluster: KubeCluster, namespace: str, status: dict[str, Any]) -> None:
    """`kubectl get bb` (and -o wide) of a finished, unqueued simulated-throughput: its headline in the columns."""
    table = cluster.kubectl("get", "bb", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "MODEL", "BATCH", "REPLICAS", "TOK/S", "REQ/S", "P50", "AGE"]
    row = table[1].split()
    assert row[:5] == ["simulated-throughput", "Succeeded", "Qwen/Qwen3-0.6B", "16", "1"]  # replicas: its default
    assert float(row[5]) == pytest.approx(status["headline"]["outputTokensPerSecond"], rel=1e-3)
    assert float(row[6]) > 0
    assert float(row[7]) > 0
    wide = cluster.kubectl("get", "bb", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-4:] == ["P99", "ENGINE", "BEST-BATCH", "QUEUE-POS"]
    assert wide[1].split()[-2:] == ["simulated", "16"]
    assert len(wide[1].split()) == len(wide[0].split()) - 1  # not queued: its Queue-Pos cell is empty
    assert status["headline"]["batchSize"] == 16


def operator_series(
    operator: InstalledOperator, name: str, labels: dict[str, str]
) -> dict[frozenset[tuple[str, str]], float]:
    """The operator's samples of one series name whose labels include ``labels``."""
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(operator.metrics())
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    }


def _job_gone(cluster: KubeCluster, namespace: str, name: str) -> bool:
    jobs = BatchV1Api(cluster.api_client()).list_namespaced_job(namespace).items
    config_maps = (
        CoreV1Api(cluster.api_client())
        .list_namespaced_config_map(namespace, label_selector=f"batchmark.dev/benchmark={name}")
        .items
    )
    return not jobs and not config_maps


def test_a_sweep_reports_every_benchmark(batchmark_operator: InstalledOperator, kube_namespace: str) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, example("simulated-sweep.yaml"))
    found = wait_for_phase(cluster, kube_namespace, "simulated-sweep", {"Succeeded", "Failed"}, 240)
    assert found["status"]["phase"] == "Succeeded", found["status"]
    assert [entry["strategy"].split("@")[0].split("x")[0] for entry in found["status"]["results"]] == [
        "synchronous",
        "throughput",
        "constant",
        "constant",
    ]


def test_manifest_output_runs_to_succeeded(batchmark_operator: InstalledOperator, kube_namespace: str) -> None:
    cluster = batchmark_operator.cluster
    manifest = run_program(
        [
            *("manifest", "--name", "from-manifest"),
            *("--backend", "kind=vllm_python_batch,model=m,batch_size=4,engine=simulated,simulation.time_scale=0.02"),
            *("--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=8"),
            *("--profile", "kind=concurrent,streams=4", "--constraint", "kind=max_requests,count=30"),
            # What a laptop run adds; the manifest must carry it into the pod, not drop it.
            *("--sweep", "batch_size=2,4", "--slo", "request_latency_p99=60", "--gpu-cost-per-hour", "2"),
            *("--repeats", "2"),
            # Nothing scrapes this pod: it ends with its run, as `run --metrics-linger 0` would.
            *("--metrics-linger", "0"),
        ],
        timeout=60,
    )
    assert manifest.code == 0, manifest.stderr
    printed = manifest.stdout
    assert yaml.safe_load(printed)["spec"]["metrics"] == {"lingerSeconds": 0.0}
    result = kubectl_apply(cluster, kube_namespace, printed)
    assert result.returncode == 0, result.stderr
    job = wait_for(
        "the Job",
        # None until the operator made it: an empty list would end the wait at once.
        lambda: json.loads(cluster.kubectl("get", "jobs", "-n", kube_namespace, "-o", "json").stdout)["items"] or None,
    )
    command = job[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--metrics-linger") + 1] == "0.0"
    found = wait_for_phase(cluster, kube_namespace, "from-manifest", {"Succeeded", "Failed"})
    assert found["status"]["phase"] == "Succeeded", found["status"]
    results = found["status"]["results"]
    # One benchmark per sweep point and repeat: the first round in the sweep's order.
    assert [entry["requests"]["completed"] for entry in results] == [30, 30, 30, 30]
    assert [entry["swept"] for entry in results[:2]] == [{"batch_size": 2}, {"batch_size": 4}]
    assert sorted((entry["batchSize"], entry["repeat"]) for entry in results) == [(2, 0), (2, 1), (4, 0), (4, 1)]
    assert all(entry["sloMet"] is True for entry in results)  # a 60 s budget, on a simulated engine
    assert all(entry["costPerMillionOutputTokens"] > 0 for entry in results)
    # The operator's result gauges keep the points and repeats apart, each with its own figure.
    expected = {(str(entry["batchSize"]), str(entry["repeat"])): entry["outputTokensPerSecond"] for entry in results}

    def exported() -> dict[tuple[str, str], float]:
        return {
            (sample.labels["batch_size"], sample.labels["repeat"]): sample.value
            for family in text_string_to_metric_families(batchmark_operator.metrics())
            for sample in family.samples
            if sample.name == "batchmark_result_output_tokens_per_second"
            and sample.labels["namespace"] == kube_namespace
            and sample.labels["name"] == "from-manifest"
        }

    # The status is patched before the gauges are set, in the same reconcile.
    wait_for("the operator's result gauges", lambda: exported() == expected, 30)


def test_a_spec_that_cannot_work_fails_with_a_reason_and_the_operator_serves_on(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    broken = short_run("broken")
    broken["spec"]["backend"]["engine"] = "vllm"
    broken["spec"]["backend"]["vllmConfig"] = {"tensor_parallel_size": "two"}
    del broken["spec"]["resources"]
    apply(cluster, kube_namespace, broken)
    failed = wait_for_phase(cluster, kube_namespace, "broken", {"Failed"}, 60)
    assert failed["status"]["reason"] == "InvalidConfig"
    assert "tensor_parallel_size" in failed["status"]["message"]
    assert BatchV1Api(cluster.api_client()).list_namespaced_job(kube_namespace).items == []
    # The series the chart's BatchBenchmarkFailed alert routes on: its namespace, name, reason and time.
    failed_at = datetime.datetime.fromisoformat(failed["status"]["completionTime"].replace("Z", "+00:00"))
    ours = {"namespace": kube_namespace, "name": "broken"}
    failure = {**ours, "reason": "InvalidConfig"}
    wait_for(
        "the failure's series",
        lambda: (
            operator_series(batchmark_operator, "batchmark_operator_benchmark_failure_timestamp_seconds", ours)
            == {frozenset(failure.items()): failed_at.timestamp()}
        ),
        30,
    )
    assert operator_series(batchmark_operator, "batchmark_operator_benchmark_phase", ours) == {
        frozenset({**ours, "phase": "Failed"}.items()): 1
    }
    batchmark_operator.assert_alive()
    apply(cluster, kube_namespace, short_run("fine"))
    assert wait_for_phase(cluster, kube_namespace, "fine", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"


def test_cancel_keeps_partial_results(batchmark_operator: InstalledOperator, kube_namespace: str) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, short_run("long", seconds=120))
    wait_for(
        "progress",
        lambda: (
            ((benchmark(cluster, kube_namespace, "long").get("status") or {}).get("progress") or {}).get(
                "requestsCompleted", 0
            )
            > 5
        ),
    )
    CustomObjectsApi(cluster.api_client()).patch_namespaced_custom_object(
        "batchmark.dev",
        "v1alpha1",
        kube_namespace,
        "batchbenchmarks",
        "long",
        {"spec": {"cancel": True}},
        _content_type="application/merge-patch+json",
    )
    found = wait_for_phase(cluster, kube_namespace, "long", {"Cancelled", "Failed", "Succeeded"}, 90)
    status = found["status"]
    assert status["phase"] == "Cancelled", status
    # The kubelet sends SIGTERM to the container's first process, the runner ("interrupted by SIGTERM").
    assert "SIGTERM" in status["results"][0]["stopReason"]
    assert status["results"][0]["requests"]["completed"] > 0
    report = results_report(cluster, kube_namespace, "long")
    assert report is not None
    assert report.complete is False


def test_operator_restart_mid_run_makes_no_second_job(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, short_run("survivor", seconds=8))
    wait_for_phase(cluster, kube_namespace, "survivor", {"Running"})
    batchmark_operator.kill()
    time.sleep(2)
    batchmark_operator.start()
    found = wait_for_phase(cluster, kube_namespace, "survivor", {"Succeeded", "Failed"})
    assert found["status"]["phase"] == "Succeeded", found["status"]
    assert found["status"]["results"]
    jobs = BatchV1Api(cluster.api_client()).list_namespaced_job(kube_namespace).items
    assert [job.metadata.name for job in jobs if job.metadata is not None] == ["survivor"]
    assert found["status"]["attempts"] == 1


def test_a_killed_pod_is_retried_and_counted(batchmark_operator: InstalledOperator, kube_namespace: str) -> None:
    cluster = batchmark_operator.cluster
    apply(cluster, kube_namespace, short_run("retried", seconds=6, retries=1))
    running = wait_for_phase(cluster, kube_namespace, "retried", {"Running"})
    first_pod = running["status"]["podName"]
    cluster.kubectl("delete", "pod", first_pod, "-n", kube_namespace, "--grace-period=1", "--wait=false")
    found = wait_for_phase(cluster, kube_namespace, "retried", {"Succeeded", "Failed"}, 180)
    status = found["status"]
    assert status["phase"] == "Succeeded", status
    assert status["attempts"] == 2
    assert status["podName"] != first_pod
    report = results_report(cluster, kube_namespace, "retried")
    assert report is not None
    assert report.complete is True


def test_results_arrive_through_the_termination_message_when_the_api_server_is_unreachable(
    batchmark_operator: InstalledOperator, kube_namespace: str, tmp_path: Path
) -> None:
    cluster = batchmark_operator.cluster
    # In-cluster clients find the API server by these two variables, which the kubelet sets and the pod's own
    # env overrides: nothing listens on port 9 of the pod's loopback.
    unreachable = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "9"},
    ]
    apply(cluster, kube_namespace, short_run("cut-off", env=unreachable))
    found = wait_for_phase(cluster, kube_namespace, "cut-off", {"Succeeded", "Failed"}, 240)
    status = found["status"]
    assert status["phase"] == "Succeeded", status
    assert status["results"][0]["requests"]["completed"] == 60
    assert status["headline"]["outputTokensPerSecond"] > 0
    assert "progress" not in status  # the runner never reached the API server
    assert results_report(cluster, kube_namespace, "cut-off") is None


def test_not_enough_gpus_waits_in_scheduling_then_runs(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    for index in range(len(cluster.gpu_node_names)):
        blocker = short_run(f"blocker-{index}", seconds=300, resources={"limits": {"nvidia.com/gpu": 8}})
        apply(cluster, kube_namespace, blocker)
    for index in range(len(cluster.gpu_node_names)):
        wait_for_phase(cluster, kube_namespace, f"blocker-{index}", {"Running"})
    apply(cluster, kube_namespace, short_run("waiting"))

    def unschedulable() -> dict[str, Any] | None:
        status: dict[str, Any] = benchmark(cluster, kube_namespace, "waiting").get("status") or {}
        return status if status.get("reason") == "Unschedulable" else None

    waiting = wait_for("Unschedulable", unschedulable, 60)
    assert waiting["phase"] == "Scheduling"
    assert "nvidia.com/gpu" in waiting["message"]
    time.sleep(3)
    assert benchmark(cluster, kube_namespace, "waiting")["status"]["phase"] == "Scheduling"
    cluster.kubectl("delete", "bb", "blocker-0", "-n", kube_namespace, "--wait=false")
    found = wait_for_phase(cluster, kube_namespace, "waiting", {"Succeeded", "Failed"}, 180)
    assert found["status"]["phase"] == "Succeeded", found["status"]
    cluster.kubectl("delete", "bb", "blocker-1", "-n", kube_namespace, "--wait=false")


def _benchmark_events(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    listing = CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=BatchBenchmark,involvedObject.name={name}"
    )
    return [{"type": event.type, "reason": event.reason, "message": event.message} for event in listing.items]


def test_an_image_that_cannot_be_pulled_waits_in_scheduling_until_its_timeout(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    # Nothing listens on port 9 of this machine: containerd's pull fails at once, and no traffic leaves.
    image = "127.0.0.1:9/batchmark/batchmark-runner:missing"
    apply(cluster, kube_namespace, short_run("unpullable", image=image, timeout=40))

    def backing_off() -> dict[str, Any] | None:
        status: dict[str, Any] = benchmark(cluster, kube_namespace, "unpullable").get("status") or {}
        return status if status.get("reason") == "ImagePullBackOff" else None

    # The kubelet cannot pull it: the operator keeps the benchmark in Scheduling with the kubelet's reason and
    # message (status.py), and warns.
    status = wait_for("ImagePullBackOff", backing_off, 90)
    assert status["phase"] == "Scheduling"
    assert status["message"].startswith(f'Back-off pulling image "{image}": ErrImagePull: ')
    assert f'failed to pull and unpack image "{image}"' in status["message"]
    conditions = {condition["type"]: condition for condition in status["conditions"]}
    assert conditions["Scheduled"]["status"] == "True"
    assert conditions["EngineLoaded"]["status"] == "False"
    assert conditions["Failed"]["status"] == "False"

    def warned() -> bool:
        # The operator records the event right after the status it reads is written: wait for it too.
        warnings = [
            event for event in _benchmark_events(cluster, kube_namespace, "unpullable") if event["type"] == "Warning"
        ]
        return any(
            event["reason"] == "ImagePullBackOff" and event["message"].startswith(f'Back-off pulling image "{image}"')
            for event in warnings
        )

    wait_for("the ImagePullBackOff warning event", warned, 10)
    pod = CoreV1Api(cluster.api_client()).read_namespaced_pod(status["podName"], kube_namespace)
    assert pod.status is not None
    assert pod.status.phase == "Pending"
    time.sleep(4)  # it waits, as on a cluster: a pull can succeed later (a registry back, a secret fixed)
    assert benchmark(cluster, kube_namespace, "unpullable")["status"]["phase"] == "Scheduling"
    batchmark_operator.assert_alive()

    # spec.timeout ends it: the Job's deadline passes while the pod still waits for its image.
    found = wait_for_phase(cluster, kube_namespace, "unpullable", {"Failed", "Succeeded"}, 90)
    status = found["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded"), status
    assert status["attempts"] == 1
    assert "progress" not in status
    assert "results" not in status


def test_a_memory_limit_below_the_runners_needs_ends_failed_oomkilled(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    # The runner on the simulated engine holds about 64 MiB of anonymous memory besides 40 MiB of the image's
    # files: at 64 MiB the kernel's memory cgroup first reclaims those file pages, so the runner crawls on
    # (minutes, on a loaded machine) before the OOM killer ends it.
    starved = short_run("starved", resources={"limits": {"nvidia.com/gpu": 1, "memory": "64Mi"}})
    apply(cluster, kube_namespace, starved)
    found = wait_for_phase(cluster, kube_namespace, "starved", {"Failed", "Succeeded"}, 300)
    status = found["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "OOMKilled"), status
    assert status["message"] == "the runner ran out of memory (raise spec.resources.limits.memory)"
    assert status["attempts"] == 1
    failed = next(condition for condition in status["conditions"] if condition["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "OOMKilled")
    pod = CoreV1Api(cluster.api_client()).read_namespaced_pod(status["podName"], kube_namespace)
    assert pod.status is not None
    state = (pod.status.container_statuses or [])[0].state
    assert state is not None
    terminated = state.terminated
    assert terminated is not None
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)
    events = _benchmark_events(cluster, kube_namespace, "starved")
    assert {"type": "Warning", "reason": "Failed", "message": f"OOMKilled: {status['message']}"} in events, events
    assert "results" not in status
