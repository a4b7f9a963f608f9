"""The local control plane behaves as a real cluster does, for what batchmark's operator relies on."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi, V1Job, V1JobCondition, V1Pod
from kubernetes.client.exceptions import ApiException

from tests.cluster import processes
from tests.cluster.controlplane import (
    GPU_TOLERATION,
    ClusterBinariesMissingError,
    ControlPlane,
    locate_binaries,
)
from tests.cluster.fixtures import KubeCluster, node_agent_cluster
from tests.polling import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """These tests are the node agent's (pods as processes of this machine, their files in this test's folders):
    a control plane of their own on it, in place of the session's on real kubelets."""
    yield from node_agent_cluster(tmp_path_factory.mktemp("agent-cluster"))


def python_job(name: str, code: str, **container_fields: Any) -> dict[str, Any]:
    """A one-try Job for one GPU whose container runs `python -c code`, shaped as a benchmark Job."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "batchmark-runner:test",
        "command": ["python", "-c", code],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        **container_fields,
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION],
        "terminationGracePeriodSeconds": 2,
        "containers": [container],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
    }


def create_job(client: ApiClient, namespace: str, manifest: dict[str, Any]) -> None:
    job = V1Job.from_dict(manifest)
    assert job is not None
    BatchV1Api(client).create_namespaced_job(namespace, job)


def job_conditions(client: ApiClient, namespace: str, name: str) -> list[V1JobCondition]:
    status = BatchV1Api(client).read_namespaced_job_status(name, namespace).status
    return list(status.conditions or []) if status is not None else []


def job_condition(client: ApiClient, namespace: str, name: str) -> str | None:
    """The type of the Job's terminal condition (Complete or Failed) once it has one."""
    for condition in job_conditions(client, namespace, name):
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return str(condition.type)
    return None


def pod_phase(client: ApiClient, namespace: str, name: str) -> str | None:
    """The pod's phase, or None once the pod is gone."""
    try:
        status = CoreV1Api(client).read_namespaced_pod(name, namespace).status
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return str(status.phase) if status is not None else "Unknown"


def job_pod(client: ApiClient, namespace: str, job_name: str) -> V1Pod | None:
    pods = CoreV1Api(client).list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items
    return pods[0] if pods else None


def test_crd_with_status_subresource_is_served_and_validated(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text(
        """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.harness.batchmark.dev}
spec:
  group: harness.batchmark.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
          status:
            type: object
            properties:
              phase: {type: string, enum: [Pending, Done]}
"""
    )
    # kubectl apply downloads the OpenAPI document: this also checks that the built server serves it intact.
    kube_cluster.kubectl("apply", "-f", str(crd))
    kube_cluster.wait("--for=condition=Established", "crd/widgets.harness.batchmark.dev")

    with kube_cluster.api_client() as client:
        widgets = CustomObjectsApi(client)
        group, version, plural = "harness.batchmark.dev", "v1", "widgets"

        def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
            return {
                "apiVersion": f"{group}/{version}",
                "kind": "Widget",
                "metadata": {"name": name},
                "spec": spec,
            }

        with pytest.raises(ApiException) as rejected:
            widgets.create_namespaced_custom_object(group, version, kube_namespace, plural, widget("bad", {"size": 0}))
        assert rejected.value.status == 422
        assert "spec.size" in str(rejected.value.body)

        widgets.create_namespaced_custom_object(group, version, kube_namespace, plural, widget("good", {"size": 3}))
        # Status is written through its subresource only: a status in the main resource's update is dropped.
        widgets.patch_namespaced_custom_object_status(
            group, version, kube_namespace, plural, "good", {"status": {"phase": "Done"}}
        )
        # The client types custom objects as `object`; they are the decoded JSON.
        stored = cast(
            dict[str, Any],
            widgets.get_namespaced_custom_object(group, version, kube_namespace, plural, "good"),
        )
        assert stored["status"] == {"phase": "Done"}
        assert stored["metadata"]["generation"] == 1

        with pytest.raises(ApiException) as bad_status:
            widgets.patch_namespaced_custom_object_status(
                group, version, kube_namespace, plural, "good", {"status": {"phase": "Exploded"}}
            )
        assert bad_status.value.status == 422

        # An update with a stale resourceVersion is refused, as optimistic concurrency requires.
        widgets.replace_namespaced_custom_object(
            group, version, kube_namespace, plural, "good", {**stored, "spec": {"size": 4}}
        )
        with pytest.raises(ApiException) as conflict:
            widgets.replace_namespaced_custom_object(
                group, version, kube_namespace, plural, "good", {**stored, "spec": {"size": 5}}
            )
        assert conflict.value.status == 409

    listing = kube_cluster.kubectl("get", "wd", "-n", kube_namespace, "-o", "name").stdout
    assert listing.split() == ["widget.harness.batchmark.dev/good"]


def test_job_runs_on_a_gpu_node_and_completes(kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"import pathlib, os; pathlib.Path({str(marker)!r}).write_text(os.environ['HOSTNAME'])"
    with kube_cluster.api_client() as client:
        # The image's path of the program does not exist here; the agent runs the program of that name.
        job = python_job("works", code, command=["/opt/image-only/bin/python", "-c", code])
        create_job(client, kube_namespace, job)
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "works")) == "Complete"
        pod = job_pod(client, kube_namespace, "works")
    assert pod is not None
    assert pod.spec is not None
    assert pod.spec.node_name in kube_cluster.gpu_node_names
    assert pod.status is not None
    assert pod.status.phase == "Succeeded"
    assert pod.metadata is not None
    assert marker.read_text() == pod.metadata.name


def test_job_fails_on_a_nonzero_exit_with_the_termination_message(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    code = "import pathlib, sys; pathlib.Path('/dev/termination-log').write_text('out of tokens'); sys.exit(3)"
    # The program writes its message where a container would; the agent maps that path for the process.
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, python_job("fails", code))
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "fails")) == "Failed"
        pod = job_pod(client, kube_namespace, "fails")
    assert pod is not None
    assert pod.status is not None
    assert pod.status.phase == "Failed"
    statuses = pod.status.container_statuses or []
    terminated = statuses[0].state.terminated if statuses[0].state else None
    assert terminated is not None
    assert terminated.exit_code == 3
    assert terminated.reason == "Error"


def test_termination_message_reaches_pod_status(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    # The message file's path comes through the environment, as a program that is told where to write it.
    code = "import os, pathlib; pathlib.Path(os.environ['MESSAGE_FILE']).write_text('tokens_per_second=1234.5')"
    job = python_job(
        "message",
        code,
        terminationMessagePath="/var/run/batchmark/summary",
        env=[{"name": "MESSAGE_FILE", "value": "/var/run/batchmark/summary"}],
    )
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, job)
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "message")) == "Complete"
        pod = job_pod(client, kube_namespace, "message")
    assert pod is not None
    assert pod.status is not None
    state = (pod.status.container_statuses or [])[0].state
    assert state is not None
    assert state.terminated is not None
    assert state.terminated.message == "tokens_per_second=1234.5"
    assert state.terminated.reason == "Completed"


def test_pod_sees_configmaps_secrets_and_its_service_account(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    report = tmp_path / "report"
    kubectl = str(kube_cluster.binaries.kubectl)
    code = f"""
import os, pathlib, subprocess, sys
config = pathlib.Path(sys.argv[1]).read_text()
who = subprocess.run([{kubectl!r}, 'auth', 'whoami', '-o', 'jsonpath={{.status.userInfo.username}}'],
                     capture_output=True, text=True, check=True).stdout
pathlib.Path({str(report)!r}).write_text('|'.join([config, os.environ['TOKEN'], who, os.getcwd()]))
"""
    kube_cluster.kubectl("create", "configmap", "bench-config", "-n", kube_namespace, "--from-literal=config.yaml=a: 1")
    kube_cluster.kubectl("create", "secret", "generic", "bench-secret", "-n", kube_namespace, "--from-literal=token=s3")
    job = python_job(
        "sees",
        code,
        # A mounted file's path reaches the program as an argument, as the runner gets its config.
        args=["/etc/bench/config.yaml"],
        volumeMounts=[{"name": "config", "mountPath": "/etc/bench"}],
        env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "bench-secret", "key": "token"}}}],
        workingDir="/etc/bench",
    )
    job["spec"]["template"]["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "bench-config"}}]
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, job)
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "sees")) == "Complete"
    config, token, who, working_directory = report.read_text().split("|")
    assert config == "a: 1"
    assert token == "s3"
    assert who == f"system:serviceaccount:{kube_namespace}:default"
    assert working_directory.endswith("/volumes/config")


def _pid_from(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


LONG_RUNNER = "import os, pathlib, time; pathlib.Path({path!r}).write_text(str(os.getpid())); time.sleep(600)"


def test_deleting_the_pod_kills_its_process(kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with kube_cluster.api_client() as client:
        core = CoreV1Api(client)
        create_job(client, kube_namespace, python_job("killed", LONG_RUNNER.format(path=str(pid_file))))
        pid = wait_for("the process to start", lambda: _pid_from(pid_file))
        pod = wait_for("the pod", lambda: job_pod(client, kube_namespace, "killed"))
        name = str(pod.metadata.name if pod.metadata else "")
        wait_for("the pod to be Running", lambda: pod_phase(client, kube_namespace, name) == "Running")
        core.delete_namespaced_pod(name, kube_namespace)
        wait_for("the process to end", lambda: _process_gone(pid), timeout_seconds=15)
        wait_for(
            "the pod object to be removed",
            lambda: pod_phase(client, kube_namespace, name) is None,
            timeout_seconds=15,
        )


def test_job_deadline_stops_the_pod(kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = python_job("deadline", LONG_RUNNER.format(path=str(pid_file)))
    job["spec"]["activeDeadlineSeconds"] = 3
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, job)
        pid = wait_for("the process to start", lambda: _pid_from(pid_file))
        assert wait_for("the Job to fail", lambda: job_condition(client, kube_namespace, "deadline")) == "Failed"
        conditions = job_conditions(client, kube_namespace, "deadline")
        assert any(condition.reason == "DeadlineExceeded" for condition in conditions)
    wait_for("the process to end", lambda: _process_gone(pid), timeout_seconds=15)


def test_the_harness_leaves_no_process_behind(tmp_path: Path) -> None:
    try:
        binaries = locate_binaries()
    except ClusterBinariesMissingError as error:
        if os.environ.get("BATCHMARK_REQUIRE_CLUSTER") == "1":
            raise
        pytest.skip(str(error))
    run_directory = tmp_path / "run"
    pid_file = tmp_path / "pid"
    control_plane = ControlPlane(run_directory, binaries, gpu_node_names=("lonely-gpu",), cpu_node_names=())
    recorded: list[processes.ProcessRecord] = []
    try:
        control_plane.start()
        control_plane.start_node_agent()
        control_plane.request(
            "POST",
            "/api/v1/namespaces/default/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "sleeper"},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "main",
                            "image": "batchmark-runner:test",
                            "command": [sys.executable, "-c", LONG_RUNNER.format(path=str(pid_file))],
                        }
                    ],
                },
            },
        )
        wait_for("the pod's process", lambda: _pid_from(pid_file))
        recorded = processes.read_records(run_directory / "pids")
    finally:
        control_plane.stop()
    names = {record.name for record in recorded}
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "nodeagent"} <= names
    assert any(name.startswith("pod-") for name in names)
    assert all(_process_gone(record.pid) for record in recorded)
    pod_pid = _pid_from(pid_file)
    assert pod_pid is not None
    assert _process_gone(pod_pid)
    leftovers = [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and str(run_directory).encode() in _command_line(entry)
    ]
    assert leftovers == []


def _command_line(process_directory: Path) -> bytes:
    try:
        return (process_directory / "cmdline").read_bytes()
    except OSError:
        return b""


def test_helm_installs_a_chart_whose_deployment_becomes_ready(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    if kube_cluster.binaries.helm is None:
        pytest.skip("helm is not built; scripts/setup/cluster-binaries.sh builds it")
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: sleeper\nversion: 0.1.0\n")
    # A Deployment without a GPU, shaped as an operator's: it runs on the plain node, and helm --wait
    # returns once its pod reports Ready.
    (chart / "templates" / "deployment.yaml").write_text(
        """
apiVersion: apps/v1
kind: Deployment
metadata: {name: sleeper}
spec:
  selector: {matchLabels: {app: sleeper}}
  template:
    metadata: {labels: {app: sleeper}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: batchmark-runner:test
        command: [python, -c, "import time; time.sleep(600)"]
"""
    )
    kube_cluster.helm("install", "sleeper", str(chart), "-n", kube_namespace, "--wait", "--timeout", "60s")
    listing = kube_cluster.kubectl("get", "pods", "-n", kube_namespace, "-l", "app=sleeper", "-o", "wide").stdout
    assert "Running" in listing
    assert "cpu-node-0" in listing
    kube_cluster.helm("uninstall", "sleeper", "-n", kube_namespace, "--wait", "--timeout", "60s")


def test_pod_deadline_fails_the_pod_as_a_kubelet_does(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    kube_cluster.request(
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "overstays"},
            "spec": {
                "restartPolicy": "Never",
                "activeDeadlineSeconds": 2,
                "terminationGracePeriodSeconds": 1,
                "tolerations": [GPU_TOLERATION],
                "containers": [
                    {
                        "name": "main",
                        "image": "batchmark-runner:test",
                        "command": ["python", "-c", LONG_RUNNER.format(path=str(pid_file))],
                    }
                ],
            },
        },
    )
    pid = wait_for("the process to start", lambda: _pid_from(pid_file))
    with kube_cluster.api_client() as client:
        assert wait_for("the pod to fail", lambda: pod_phase(client, kube_namespace, "overstays") == "Failed")
        status = CoreV1Api(client).read_namespaced_pod_status("overstays", kube_namespace).status
    assert status is not None
    assert status.reason == "DeadlineExceeded"
    assert _process_gone(pid)


def test_a_pod_lost_in_an_agent_restart_fails_as_on_a_rebooted_node(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, python_job("lost", LONG_RUNNER.format(path=str(pid_file))))
        pid = wait_for("the process to start", lambda: _pid_from(pid_file))
        pod = wait_for("the pod", lambda: job_pod(client, kube_namespace, "lost"))
        name = str(pod.metadata.name if pod.metadata else "")
        wait_for("the pod to be Running", lambda: pod_phase(client, kube_namespace, name) == "Running")
        kube_cluster.stop_node_agent()
        try:
            assert _process_gone(pid)
        finally:
            kube_cluster.start_node_agent()
        assert wait_for("the pod to fail", lambda: pod_phase(client, kube_namespace, name) == "Failed")
        assert wait_for("the Job to fail", lambda: job_condition(client, kube_namespace, "lost")) == "Failed"
        status = CoreV1Api(client).read_namespaced_pod_status(name, kube_namespace).status
    assert status is not None
    terminated = (status.container_statuses or [])[0].state
    assert terminated is not None
    assert terminated.terminated is not None
    assert terminated.terminated.reason == "ContainerStatusUnknown"


def test_kubectl_logs_shows_the_containers_output(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    code = "for step in range(3): print('step', step, flush=True)"
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, python_job("talks", code))
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "talks")) == "Complete"
    logs = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/talks").stdout
    assert logs.splitlines() == ["step 0", "step 1", "step 2"]
    last = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/talks", "--tail=1").stdout
    assert last.splitlines() == ["step 2"]


# Serves 200 on /ready once the file `gate` exists, 503 before; records its port for the test.
GATED_SERVER = """
import http.server, os, socketserver, sys
gate, port_file = sys.argv[1], sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if os.path.exists(gate) else 503)
        self.end_headers()
    def log_message(self, *arguments):
        pass
server = socketserver.TCPServer(("127.0.0.1", int(sys.argv[3])), Handler)
open(port_file, "w").write(str(server.server_address[1]))
server.serve_forever()
"""


def test_a_readiness_probe_decides_when_a_running_pod_is_ready(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    with socket.socket() as probe_socket:  # a free port: pods share this machine's ports
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    gate, port_file = tmp_path / "gate", tmp_path / "port"
    kube_cluster.request(
        "POST",
        f"/api/v1/namespaces/{kube_namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gated"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": "batchmark-runner:test",
                        "command": ["python", "-c", GATED_SERVER, str(gate), str(port_file), str(port)],
                        "ports": [{"name": "http", "containerPort": port}],
                        "readinessProbe": {
                            "httpGet": {"path": "/ready", "port": "http"},
                            "periodSeconds": 1,
                            "failureThreshold": 2,
                        },
                    }
                ],
            },
        },
    )

    def ready() -> tuple[str | None, bool | None]:
        pod = kube_cluster.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods/gated")
        status = pod.get("status") or {}
        conditions = {c["type"]: c["status"] == "True" for c in status.get("conditions", [])}
        return status.get("phase"), conditions.get("Ready")

    wait_for("the server to listen", lambda: port_file.exists() or None)
    time.sleep(3)  # three probes answered 503
    assert ready() == ("Running", False)
    gate.touch()
    wait_for("the pod to become Ready", lambda: ready() == ("Running", True))
    gate.unlink()
    wait_for("the pod to lose readiness", lambda: ready() == ("Running", False))
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/gated")
