"""The local control plane behaves as a real cluster does, for what batchmark's operator relies on: the API server
serves CRDs, and its nodes' kubelets run pods as containers of their images (the session's cluster, real kubelets
over containerd) with what a kubelet does for a pod spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi, V1Job, V1JobCondition, V1Pod
from kubernetes.client.exceptions import ApiException

from devtools.cluster import images, processes
from devtools.cluster.controlplane import GPU_TAINT, GPU_TOLERATION, ControlPlane, locate_runtime_binaries
from devtools.cluster.ociarchive import write_image_archive
from tests.cluster_fixtures import KubeCluster, required_binaries, required_runtime
from tests.integration.cluster.containers import container_process, cpu_weight, process_gone
from tests.polling import CLUSTER_PATIENCE_SECONDS, wait_for

pytestmark = pytest.mark.cluster

RUNNER_IMAGE = images.TAGS["runner"]


def python_job(name: str, code: str, **container_fields: Any) -> dict[str, Any]:
    """A one-try Job for one GPU whose container runs `python -c code` in the runner image, shaped as a benchmark
    Job."""
    container: dict[str, Any] = {
        "name": "main",
        "image": RUNNER_IMAGE,
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


def python_pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A pod that tolerates the GPU taint, ends quickly when deleted and, unless told, is not restarted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [GPU_TOLERATION],
            "containers": containers,
            **spec,
        },
    }


def python_container(name: str, code: str, *args: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": RUNNER_IMAGE, "command": ["python", "-c", code, *args], **fields}


def create_job(client: ApiClient, namespace: str, manifest: dict[str, Any]) -> None:
    job = V1Job.from_dict(manifest)
    assert job is not None
    BatchV1Api(client).create_namespaced_job(namespace, job)


def create_pod(cluster: KubeCluster, namespace: str, pod: dict[str, Any]) -> None:
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def read_pod(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found


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


def container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(status for status in pod["status"].get("containerStatuses", []) if status["name"] == name)


def pod_events(cluster: KubeCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
    listing = cluster.request("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")
    events: list[dict[str, Any]] = listing["items"]
    return events


def has_event(events: list[dict[str, Any]], kind: str, reason: str, message_start: str) -> bool:
    return any(
        (event["type"], event["reason"]) == (kind, reason) and event["message"].startswith(message_start)
        for event in events
    )


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


def test_job_runs_on_a_gpu_node_and_completes(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    code = "import os; print(os.environ['HOSTNAME'], os.getuid())"
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, python_job("works", code))
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "works")) == "Complete"
        pod = job_pod(client, kube_namespace, "works")
    assert pod is not None
    assert pod.spec is not None
    assert pod.spec.node_name in kube_cluster.gpu_node_names
    # The node as the kubelet registered it, with the fake GPUs' capacity and taint the control plane adds.
    node = kube_cluster.request("GET", f"/api/v1/nodes/{pod.spec.node_name}")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(kube_cluster.gpus_per_node)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert GPU_TAINT in node["spec"]["taints"]
    assert pod.status is not None
    assert pod.status.phase == "Succeeded"
    assert pod.metadata is not None
    # In the image, as its user (the Dockerfile's USER).
    logs = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/works").stdout.split()
    assert logs == [pod.metadata.name, "10001"]


def test_job_fails_on_a_nonzero_exit_with_the_termination_message(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    code = "import pathlib, sys; pathlib.Path('/dev/termination-log').write_text('out of tokens'); sys.exit(3)"
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
    assert terminated.message == "out of tokens"


def test_termination_message_reaches_pod_status(kube_cluster: KubeCluster, kube_namespace: str) -> None:
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


# Who the pod's service-account token says it is, asked of the API server as in-cluster clients reach it.
WHO_AM_I = """
import json, os, ssl, urllib.request
account = "/var/run/secrets/kubernetes.io/serviceaccount"
server = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
request = urllib.request.Request(server + "/apis/authentication.k8s.io/v1/selfsubjectreviews", data=body)
request.add_header("Content-Type", "application/json")
request.add_header("Authorization", "Bearer " + open(account + "/token").read())
context = ssl.create_default_context(cafile=account + "/ca.crt")
with urllib.request.urlopen(request, context=context, timeout=10) as answer:
    who = json.load(answer)["status"]["userInfo"]["username"]
print("|".join([open("config.yaml").read(), os.environ["TOKEN"], who, os.getcwd()]))
"""


def test_pod_sees_configmaps_secrets_and_its_service_account(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    kube_cluster.kubectl("create", "configmap", "bench-config", "-n", kube_namespace, "--from-literal=config.yaml=a: 1")
    kube_cluster.kubectl("create", "secret", "generic", "bench-secret", "-n", kube_namespace, "--from-literal=token=s3")
    job = python_job(
        "sees",
        WHO_AM_I,
        volumeMounts=[{"name": "config", "mountPath": "/etc/bench"}],
        env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "bench-secret", "key": "token"}}}],
        workingDir="/etc/bench",
    )
    job["spec"]["template"]["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "bench-config"}}]
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, job)
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "sees")) == "Complete"
    logs = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/sees").stdout.strip()
    assert logs.split("|") == ["a: 1", "s3", f"system:serviceaccount:{kube_namespace}:default", "/etc/bench"]


LONG_RUNNER = "import time; time.sleep(600)"


def running_process(client: ApiClient, namespace: str, name: str) -> int:
    """The PID (on this machine) of the pod's long-running container process, once the pod is Running."""
    wait_for("the pod to be Running", lambda: pod_phase(client, namespace, name) == "Running")
    pod = CoreV1Api(client).read_namespaced_pod(name, namespace)
    uid = str(pod.metadata.uid if pod.metadata else "")
    return wait_for("the container's process", lambda: container_process(uid, LONG_RUNNER), 30)


def test_deleting_the_pod_kills_its_process(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    with kube_cluster.api_client() as client:
        core = CoreV1Api(client)
        create_job(client, kube_namespace, python_job("killed", LONG_RUNNER))
        pod = wait_for("the pod", lambda: job_pod(client, kube_namespace, "killed"))
        name = str(pod.metadata.name if pod.metadata else "")
        pid = running_process(client, kube_namespace, name)
        core.delete_namespaced_pod(name, kube_namespace)
        wait_for("the process to end", lambda: process_gone(pid), timeout_seconds=15)
        # The kubelet removes the object once it has torn the pod's sandbox down (containerd, the CNI plugins): 4 s
        # on a quiet machine, over 15 s once beside the vLLM tests on both cores. The process' end is what is timed.
        wait_for(
            "the pod object to be removed",
            lambda: pod_phase(client, kube_namespace, name) is None,
            timeout_seconds=CLUSTER_PATIENCE_SECONDS,
        )


def test_job_deadline_stops_the_pod(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    job = python_job("deadline", LONG_RUNNER)
    job["spec"]["activeDeadlineSeconds"] = 10
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, job)
        pod = wait_for("the pod", lambda: job_pod(client, kube_namespace, "deadline"))
        pid = running_process(client, kube_namespace, str(pod.metadata.name if pod.metadata else ""))
        assert wait_for("the Job to fail", lambda: job_condition(client, kube_namespace, "deadline")) == "Failed"
        conditions = job_conditions(client, kube_namespace, "deadline")
        assert any(condition.reason == "DeadlineExceeded" for condition in conditions)
    wait_for("the process to end", lambda: process_gone(pid), timeout_seconds=15)


def test_the_harness_leaves_no_process_behind(tmp_path: Path) -> None:
    binaries = required_binaries()
    required_runtime()
    run_directory = tmp_path / "run"
    control_plane = ControlPlane(
        run_directory, binaries, gpu_node_names=("lonely-gpu",), cpu_node_names=(), runtime="containers"
    )
    recorded: list[processes.ProcessRecord] = []
    node_folder: Path | None = None
    pid = None
    try:
        control_plane.start()
        # A one-file image (Kubernetes' pause program) is enough for a container that runs until it is killed.
        image, archive = "localhost/batchmark-sleeper:test", tmp_path / "sleeper.tar"
        pause = locate_runtime_binaries().pause
        write_image_archive(archive, image, {"/pause": (pause, 0o755)}, ["/pause"], user="65535")
        control_plane.load_images([archive])
        create_pod(
            control_plane,
            "default",
            python_pod("sleeper", [{"name": "main", "image": image, "command": ["/pause"]}]),
        )
        with control_plane.api_client() as client:
            wait_for(
                "the pod to be Running",
                lambda: pod_phase(client, "default", "sleeper") == "Running",
                CLUSTER_PATIENCE_SECONDS,
            )
            uid = str(CoreV1Api(client).read_namespaced_pod("sleeper", "default").metadata.uid)  # type: ignore[union-attr]
        pid = wait_for("the container's process", lambda: container_process(uid, "/pause"), 30)
        recorded = processes.read_records(run_directory / "pids")
        node_folder = (run_directory / "nodes" / "lonely-gpu").resolve()
    finally:
        control_plane.stop()
    names = {record.name for record in recorded}
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= names
    assert any(name.startswith("kubelet-") for name in names), names
    assert any(name.startswith("containerd-") for name in names), names
    assert all(process_gone(record.pid) for record in recorded)
    assert pid is not None
    assert process_gone(pid)
    assert node_folder is not None
    assert not node_folder.exists()
    leftovers = [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and any(str(folder).encode() in _command_line(entry) for folder in (run_directory, node_folder))
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
        f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: sleeper}}
spec:
  selector: {{matchLabels: {{app: sleeper}}}}
  template:
    metadata: {{labels: {{app: sleeper}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: {RUNNER_IMAGE}
        command: [python, -c, "import time; time.sleep(600)"]
"""
    )
    kube_cluster.helm("install", "sleeper", str(chart), "-n", kube_namespace, "--wait", "--timeout", "90s")
    listing = kube_cluster.kubectl("get", "pods", "-n", kube_namespace, "-l", "app=sleeper", "-o", "wide").stdout
    assert "Running" in listing
    assert "cpu-node-0" in listing
    kube_cluster.helm("uninstall", "sleeper", "-n", kube_namespace, "--wait", "--timeout", "90s")


def test_pod_deadline_fails_the_pod_as_a_kubelet_does(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    pod = python_pod("overstays", [python_container("main", LONG_RUNNER)], activeDeadlineSeconds=10)
    create_pod(kube_cluster, kube_namespace, pod)
    with kube_cluster.api_client() as client:
        pid = running_process(client, kube_namespace, "overstays")
        wait_for(
            "the pod to fail",
            lambda: pod_phase(client, kube_namespace, "overstays") == "Failed",
            CLUSTER_PATIENCE_SECONDS,
        )
        status = CoreV1Api(client).read_namespaced_pod_status("overstays", kube_namespace).status
    assert status is not None
    assert status.reason == "DeadlineExceeded"
    wait_for("the process to end", lambda: process_gone(pid), timeout_seconds=15)


def test_kubectl_logs_shows_the_containers_output(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    code = "for step in range(3): print('step', step, flush=True)"
    with kube_cluster.api_client() as client:
        create_job(client, kube_namespace, python_job("talks", code))
        assert wait_for("the Job to finish", lambda: job_condition(client, kube_namespace, "talks")) == "Complete"
    logs = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/talks").stdout
    assert logs.splitlines() == ["step 0", "step 1", "step 2"]
    last = kube_cluster.kubectl("logs", "-n", kube_namespace, "job/talks", "--tail=1").stdout
    assert last.splitlines() == ["step 2"]


# Serves 200 on /ready while the file /tmp/gate exists, 503 otherwise, on the pod's own address.
GATED_SERVER = """
import http.server, os, socketserver
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if os.path.exists("/tmp/gate") else 503)
        self.end_headers()
    def log_message(self, *arguments):
        pass
socketserver.TCPServer(("", 8080), Handler).serve_forever()
"""


def test_a_readiness_probe_decides_when_a_running_pod_is_ready(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    container = python_container(
        "main",
        GATED_SERVER,
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1, "failureThreshold": 2},
    )
    create_pod(kube_cluster, kube_namespace, python_pod("gated", [container], tolerations=[]))

    def ready() -> tuple[str | None, bool | None]:
        status = read_pod(kube_cluster, kube_namespace, "gated").get("status") or {}
        conditions = {c["type"]: c["status"] == "True" for c in status.get("conditions", [])}
        return status.get("phase"), conditions.get("Ready")

    def gate(command: str) -> None:
        kube_cluster.kubectl("exec", "-n", kube_namespace, "gated", "--", command, "/tmp/gate")

    wait_for("the pod to run, not ready", lambda: ready() == ("Running", False), CLUSTER_PATIENCE_SECONDS)
    gate("touch")
    wait_for("the pod to become Ready", lambda: ready() == ("Running", True))
    gate("rm")
    wait_for("the pod to lose readiness", lambda: ready() == ("Running", False))
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/gated")


# Nothing listens on port 9 of this machine: a pull from it fails at once, and no traffic leaves.
UNPULLABLE_IMAGE = "127.0.0.1:9/batchmark/absent:1"


def test_pull_policies_unpullable_and_invalid_images_as_a_kubelet_reports_them(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    present_elsewhere = next(name for name in images.default_names("runner") if name.startswith("ghcr.io/"))
    containers = [
        # On the node: no pull under IfNotPresent or Never.
        python_container("present", LONG_RUNNER, imagePullPolicy="IfNotPresent"),
        {**python_container("never-present", LONG_RUNNER), "image": present_elsewhere, "imagePullPolicy": "Never"},
        {**python_container("unpullable", LONG_RUNNER), "image": UNPULLABLE_IMAGE},
        {**python_container("never-absent", LONG_RUNNER), "image": UNPULLABLE_IMAGE, "imagePullPolicy": "Never"},
        {**python_container("invalid", LONG_RUNNER), "image": "Batchmark/Runner:1"},
    ]
    create_pod(kube_cluster, kube_namespace, python_pod("policies", containers))

    def settled() -> dict[str, Any] | None:
        pod = read_pod(kube_cluster, kube_namespace, "policies")
        states = {status["name"]: status["state"] for status in pod["status"].get("containerStatuses", [])}
        running = all("running" in states.get(name, {}) for name in ("present", "never-present"))
        waiting = [
            states.get(name, {}).get("waiting", {}).get("reason") for name in ("unpullable", "never-absent", "invalid")
        ]
        return pod if running and waiting == ["ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"] else None

    pod = wait_for("the containers to start or wait", settled, 90)
    # Containers that never started keep the pod Pending.
    assert pod["status"]["phase"] == "Pending"
    backing_off = container_status(pod, "unpullable")
    assert backing_off["restartCount"] == 0
    assert backing_off["state"]["waiting"]["message"].startswith(f'Back-off pulling image "{UNPULLABLE_IMAGE}"')
    never = container_status(pod, "never-absent")["state"]["waiting"]
    assert never["message"] == f'Container image "{UNPULLABLE_IMAGE}" is not present with pull policy of Never'
    invalid = container_status(pod, "invalid")["state"]["waiting"]
    assert invalid["message"].startswith('Failed to apply default image tag "Batchmark/Runner:1"'), invalid
    events = pod_events(kube_cluster, kube_namespace, "policies")
    for kind, reason, message in (
        ("Normal", "Pulled", f'Container image "{RUNNER_IMAGE}" already present on machine'),
        ("Normal", "Pulled", f'Container image "{present_elsewhere}" already present on machine'),
        ("Normal", "Pulling", f'Pulling image "{UNPULLABLE_IMAGE}"'),
        ("Warning", "Failed", f'Failed to pull image "{UNPULLABLE_IMAGE}"'),
        ("Warning", "Failed", "Error: ErrImagePull"),
        ("Normal", "BackOff", f'Back-off pulling image "{UNPULLABLE_IMAGE}"'),
        ("Warning", "Failed", "Error: ImagePullBackOff"),
        ("Warning", "ErrImageNeverPull", never["message"]),
        ("Warning", "Failed", "Error: ErrImageNeverPull"),
        ("Warning", "InspectFailed", invalid["message"]),
    ):
        assert has_event(events, kind, reason, message), (reason, message, json.dumps(events, indent=1))
    # A pod that never got its images goes away when deleted.
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/policies")
    with kube_cluster.api_client() as client:
        wait_for("the pod to be removed", lambda: pod_phase(client, kube_namespace, "policies") is None, 30)


# Allocates (and writes to, so it is resident) `step` MiB at a time, printing the MiB held after each step.
ALLOCATOR = """
import sys, time
step, steps = int(sys.argv[1]), int(sys.argv[2])
held = []
for index in range(steps):
    held.append(b"x" * (step * 2**20))
    print(step * (index + 1), flush=True)
    time.sleep(0.05)
print("done", flush=True)
"""


def test_a_container_over_its_memory_limit_is_oom_killed_and_restarted_and_one_under_it_completes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    limits = {"resources": {"limits": {"memory": "128Mi"}}}
    greedy = python_container("main", ALLOCATOR, "16", "64", **limits)
    modest = python_container("main", ALLOCATOR, "16", "2", **limits)
    create_pod(kube_cluster, kube_namespace, python_pod("greedy", [greedy], restartPolicy="OnFailure"))
    create_pod(kube_cluster, kube_namespace, python_pod("modest", [modest]))

    def restarted() -> dict[str, Any] | None:
        statuses = read_pod(kube_cluster, kube_namespace, "greedy")["status"].get("containerStatuses", [])
        return next(
            (status for status in statuses if status["restartCount"] >= 1 and status["lastState"].get("terminated")),
            None,
        )

    last = wait_for("a restart after the OOM kill", restarted, 120)["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/greedy")

    def finished() -> dict[str, Any] | None:
        pod = read_pod(kube_cluster, kube_namespace, "modest")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = wait_for("the modest pod to end", finished, CLUSTER_PATIENCE_SECONDS)
    assert pod["status"]["phase"] == "Succeeded"
    terminated = container_status(pod, "main")["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("Completed", 0)


def test_a_containers_cpu_request_sets_its_cgroups_cpu_weight(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    # cpu.shares as a kubelet sets it (millicores * 1024 / 1000, at least 2), and cgroup v2's cpu.weight from it.
    expected = {"best-effort": (None, 2, 1), "half-a-core": ("500m", 512, 20), "one-core": ("1", 1024, 39)}
    for name, (cpu, _, _) in expected.items():
        container = python_container("main", LONG_RUNNER)
        if cpu:
            container["resources"] = {"requests": {"cpu": cpu}}
        create_pod(kube_cluster, kube_namespace, python_pod(name, [container]))
    with kube_cluster.api_client() as client:
        for name, (_, shares, weight) in expected.items():
            setting, value = cpu_weight(running_process(client, kube_namespace, name))
            assert value == (shares if setting == "cpu.shares" else weight), (name, setting, value)
            kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/{name}")
