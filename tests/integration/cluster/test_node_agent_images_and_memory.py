"""The node agent as a kubelet about images and memory limits: an image the node lacks cannot be pulled (no
registry is reachable from the fake nodes), and a container over its memory limit is OOM-killed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.operator.api import DEFAULT_IMAGE
from tests.cluster.controlplane import GPU_TOLERATION
from tests.cluster.fixtures import KubeCluster, node_agent_cluster
from tests.cluster.nodeagent import (
    PROJECT_IMAGES,
    ImageReference,
    ImageStore,
    MemoryLimits,
    default_pull_policy,
    memory_limit,
    quantity_value,
)
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[3]
MISSING_IMAGE = "registry.invalid/batchmark/absent:1"


# Allocates (and writes to, so it is resident) `step` MiB at a time, printing the MiB held after each step;
# with a fork, the child allocates and the parent only waits: the tree is measured, not the first process.
ALLOCATOR = """
import os, sys, time
step, steps, hold, fork = (int(value) for value in sys.argv[1:5])
if fork:
    child = os.fork()
    if child:
        open(sys.argv[5], "w").write(str(child))
        os.waitpid(child, 0)
        sys.exit(0)
held = []
for index in range(steps):
    held.append(b"x" * (step * 2**20))
    print(step * (index + 1), flush=True)
    time.sleep(0.05)
time.sleep(hold)
print("done", flush=True)
"""


# Without a cluster: references, the node's images, quantities, and the memory limit on a process tree.


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """These tests are the node agent's (pods as processes of this machine, their files in this test's folders):
    a control plane of their own on it, in place of the session's on real kubelets."""
    yield from node_agent_cluster(tmp_path_factory.mktemp("agent-cluster"))


def test_image_references_are_normalised_as_a_container_runtime_does() -> None:
    assert str(ImageReference.parse("busybox")) == "docker.io/library/busybox:latest"
    assert str(ImageReference.parse("batchmark-runner:0.1.0")) == "docker.io/library/batchmark-runner:0.1.0"
    assert str(ImageReference.parse("org/tool")) == "docker.io/org/tool:latest"
    assert str(ImageReference.parse("index.docker.io/org/tool:2")) == "docker.io/org/tool:2"
    local = ImageReference.parse("localhost:5000/ml/runner:1")
    assert (local.repository, local.tag, local.registry) == ("localhost:5000/ml/runner", "1", "localhost:5000")
    digest = "sha256:" + "a" * 64
    pinned = ImageReference.parse(f"ghcr.io/batchmark/batchmark-runner@{digest}")
    assert (pinned.tag, pinned.digest) == (None, digest)
    for invalid in ("Batchmark/Runner:1", "runner:a:b", "runner:*", "-runner", "runner:"):
        with pytest.raises(ValueError, match="invalid reference format"):
            ImageReference.parse(invalid)
    # The API server's default pull policy, which the agent applies to a spec that lacks one.
    assert default_pull_policy(ImageReference.parse("busybox")) == "Always"
    assert default_pull_policy(ImageReference.parse("busybox:1.36")) == "IfNotPresent"
    assert default_pull_policy(ImageReference.parse(f"busybox@{digest}")) == "IfNotPresent"


def test_the_nodes_hold_the_images_the_chart_and_the_operator_use_and_nothing_else() -> None:
    store = ImageStore(PROJECT_IMAGES)
    values = yaml.safe_load((ROOT / "charts" / "batchmark" / "values.yaml").read_text())
    app_version = yaml.safe_load((ROOT / "charts" / "batchmark" / "Chart.yaml").read_text())["appVersion"]
    used = [
        f"{values['operator']['image']['repository']}:{app_version}",
        f"{values['benchmarkDefaults']['image']['repository']}:{app_version}",
        DEFAULT_IMAGE,
        "batchmark-runner:test",  # the tests' own pods
        "docker.io/library/batchmark-runner:upgraded",  # any tag: each runs this checkout
        "batchmark-runner",  # :latest
    ]
    for image in used:
        assert store.has(ImageReference.parse(image)), image
    for image in ("busybox", MISSING_IMAGE, "registry.example.com:5000/ml/batchmark-runner:0.1.0-cuda12"):
        assert not store.has(ImageReference.parse(image)), image
    # More images are configurable (nodeagent.py --image), by tag or digest.
    digest = "sha256:" + "b" * 64
    extended = ImageStore([*PROJECT_IMAGES, "example.org/tools/probe:1", f"example.org/tools/pinned@{digest}"])
    assert extended.has(ImageReference.parse("example.org/tools/probe:1"))
    assert not extended.has(ImageReference.parse("example.org/tools/probe:2"))
    assert extended.has(ImageReference.parse(f"example.org/tools/pinned@{digest}"))
    assert not extended.has(ImageReference.parse("example.org/tools/pinned:1"))


def test_quantities_and_memory_limits_read_as_kubernetes_writes_them() -> None:
    assert quantity_value("64Mi") == 64 * 2**20
    assert quantity_value("1Gi") == 2**30
    assert quantity_value("500M") == 500e6
    assert quantity_value("129e6") == 129e6
    assert quantity_value("128974848") == 128974848
    assert quantity_value("0.5Gi") == 2**29
    assert quantity_value("500m") == 0.5
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_value("64 MiB")
    assert memory_limit({"resources": {"limits": {"memory": "64Mi", "cpu": "1"}}}) == 64 * 2**20
    assert memory_limit({"resources": {"requests": {"memory": "64Mi"}}}) is None
    assert memory_limit({}) is None


def _held(output: Path) -> list[int]:
    return [int(line) for line in output.read_text().split() if line.isdigit()]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_process_tree_over_its_memory_limit_is_killed_whole_and_one_under_it_is_left_alone(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    limits = MemoryLimits(log.append)
    limit = 128 * 2**20
    over_output, under_output, child_file = tmp_path / "over", tmp_path / "under", tmp_path / "child"
    kills: list[int] = []
    with over_output.open("w") as over_log, under_output.open("w") as under_log:
        # The first process only waits; its forked child allocates up to 1 GiB in 16 MiB steps.
        over = subprocess.Popen(
            [sys.executable, "-c", ALLOCATOR, "16", "64", "30", "1", str(child_file)],
            stdout=over_log,
            start_new_session=True,
        )
        under = subprocess.Popen(
            [sys.executable, "-c", ALLOCATOR, "16", "4", "2", "0"], stdout=under_log, start_new_session=True
        )
    try:
        limits.watch(over.pid, limit, kills.append)
        limits.watch(under.pid, 512 * 2**20, kills.append)
        assert over.wait(timeout=60) == -9
        assert under.wait(timeout=60) == 0
    finally:
        for process in (over, under):
            process.kill()
            process.wait()
    child = int(child_file.read_text())
    wait_for("the forked child to be killed too", lambda: _gone(child), 10)
    assert len(kills) == 1
    assert kills[0] > limit
    held = _held(over_output)
    # Killed near the limit: not before the child held most of it, long before it held 1 GiB (the
    # overshoot is what it allocates in one poll).
    assert 64 <= max(held) < 512, held
    assert "done" not in over_output.read_text()
    assert under_output.read_text().split()[-1] == "done"
    assert log == []


# On the control plane: pods through the node agent.


def _pod(name: str, containers: list[dict[str, Any]], restart_policy: str = "Never") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [GPU_TOLERATION],
            "containers": containers,
        },
    }


def _container(name: str, image: str, code: str, *args: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["python", "-c", code, *args], **fields}


def _create(cluster: KubeCluster, namespace: str, pod: dict[str, Any]) -> None:
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def _read(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(status for status in pod["status"].get("containerStatuses", []) if status["name"] == name)


def _waiting(cluster: KubeCluster, namespace: str, pod: str, container: str, reason: str) -> dict[str, Any] | None:
    """The container's waiting state while it has that reason."""
    statuses = _read(cluster, namespace, pod)["status"].get("containerStatuses", [])
    for status in statuses:
        waiting = status["state"].get("waiting") or {}
        if status["name"] == container and waiting.get("reason") == reason:
            return {**waiting, "phase": _read(cluster, namespace, pod)["status"]["phase"]}
    return None


def _events(cluster: KubeCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
    listing = cluster.request("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")
    events: list[dict[str, Any]] = listing["items"]
    return events


def _event(events: list[dict[str, Any]], kind: str, reason: str, message: str) -> dict[str, Any] | None:
    return next(
        (e for e in events if (e["type"], e["reason"], e["message"]) == (kind, reason, message)),
        None,
    )


@pytest.mark.cluster
def test_an_image_the_node_lacks_fails_to_pull_and_backs_off_as_on_a_kubelet(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    _create(kube_cluster, kube_namespace, _pod("unpullable", [_container("main", MISSING_IMAGE, code)]))

    failed = wait_for(
        "ErrImagePull", lambda: _waiting(kube_cluster, kube_namespace, "unpullable", "main", "ErrImagePull")
    )
    reference = "registry.invalid/batchmark/absent:1"
    assert failed["message"].startswith(
        f'rpc error: code = Unavailable desc = failed to pull and unpack image "{reference}": '
        f'failed to resolve reference "{reference}": failed to do request: '
        f'Head "https://registry.invalid/v2/batchmark/absent/manifests/1": no registry is reachable'
    )
    assert failed["phase"] == "Pending"
    backing_off = wait_for(
        "ImagePullBackOff",
        lambda: _waiting(kube_cluster, kube_namespace, "unpullable", "main", "ImagePullBackOff"),
    )
    assert backing_off["message"] == f'Back-off pulling image "{MISSING_IMAGE}": ErrImagePull: {failed["message"]}'
    assert backing_off["phase"] == "Pending"

    # After the back-off it tries again (and fails again): the kubelet's events, each repeat counted on the first.
    def pulled_twice() -> list[dict[str, Any]] | None:
        events = _events(kube_cluster, kube_namespace, "unpullable")
        pulling = _event(events, "Normal", "Pulling", f'Pulling image "{MISSING_IMAGE}"')
        return events if pulling is not None and pulling["count"] >= 2 else None

    events = wait_for("a second pull", pulled_twice, 30)
    for kind, reason, message in (
        ("Warning", "Failed", f'Failed to pull image "{MISSING_IMAGE}": {failed["message"]}'),
        ("Warning", "Failed", "Error: ErrImagePull"),
        ("Normal", "BackOff", f'Back-off pulling image "{MISSING_IMAGE}"'),
        ("Warning", "Failed", "Error: ImagePullBackOff"),
    ):
        found = _event(events, kind, reason, message)
        assert found is not None, (reason, message, events)
        assert found["source"]["component"] == "kubelet"
    assert not any(event["reason"] == "Started" for event in events)
    pod = _read(kube_cluster, kube_namespace, "unpullable")
    assert pod["status"]["phase"] == "Pending"
    assert _container_status(pod, "main")["restartCount"] == 0
    assert not marker.exists()

    # A pod that never got its image goes away at once when deleted.
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/unpullable")

    def deleted() -> bool:
        listing = kube_cluster.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods")
        return all(item["metadata"]["name"] != "unpullable" for item in listing["items"])

    wait_for("the pod to be removed", deleted, 20)


@pytest.mark.cluster
def test_pull_policies_and_invalid_references_as_on_a_kubelet(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    code = "import time; time.sleep(600)"
    containers = [
        # Present on the node: no pull under IfNotPresent or Never; Always pulls (the node's registry has it).
        _container("present", "batchmark-runner:test", code, imagePullPolicy="IfNotPresent"),
        _container("never-present", "ghcr.io/batchmark/batchmark-runner:0.0.1", code, imagePullPolicy="Never"),
        _container("always-present", "batchmark-operator:any", code, imagePullPolicy="Always"),
        _container("never-absent", MISSING_IMAGE, code, imagePullPolicy="Never"),
        _container("invalid", "Batchmark/Runner:1", code),
    ]
    _create(kube_cluster, kube_namespace, _pod("policies", containers))

    def settled() -> dict[str, Any] | None:
        pod = _read(kube_cluster, kube_namespace, "policies")
        states = {status["name"]: status["state"] for status in pod["status"].get("containerStatuses", [])}
        running = all("running" in states.get(name, {}) for name in ("present", "never-present", "always-present"))
        waiting = [states.get(name, {}).get("waiting", {}).get("reason") for name in ("never-absent", "invalid")]
        return pod if running and waiting == ["ErrImageNeverPull", "InvalidImageName"] else None

    pod = wait_for("the containers to start or wait", settled)
    # Containers that never started keep the pod Pending, as a kubelet reports it.
    assert pod["status"]["phase"] == "Pending"
    never = _container_status(pod, "never-absent")["state"]["waiting"]
    assert never["message"] == f'Container image "{MISSING_IMAGE}" is not present with pull policy of Never'
    invalid = _container_status(pod, "invalid")["state"]["waiting"]
    assert invalid["message"] == (
        'Failed to apply default image tag "Batchmark/Runner:1": '
        'couldn\'t parse image reference "Batchmark/Runner:1": invalid reference format'
    )
    events = _events(kube_cluster, kube_namespace, "policies")
    for kind, reason, message in (
        ("Normal", "Pulled", 'Container image "batchmark-runner:test" already present on machine'),
        ("Normal", "Pulled", 'Container image "ghcr.io/batchmark/batchmark-runner:0.0.1" already present on machine'),
        ("Normal", "Pulling", 'Pulling image "batchmark-operator:any"'),
        ("Warning", "ErrImageNeverPull", never["message"]),
        ("Warning", "Failed", "Error: ErrImageNeverPull"),
        ("Warning", "InspectFailed", invalid["message"]),
    ):
        assert _event(events, kind, reason, message) is not None, (reason, message, events)
    assert any(
        event["reason"] == "Pulled"
        and event["message"].startswith('Successfully pulled image "batchmark-operator:any"')
        for event in events
    )
    assert not any(MISSING_IMAGE in event["message"] and event["reason"] == "Pulling" for event in events)


@pytest.mark.cluster
def test_a_container_over_its_memory_limit_is_oom_killed_and_one_under_it_completes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    limits = {"resources": {"limits": {"memory": "128Mi"}}}
    greedy = _container("main", "batchmark-runner:test", ALLOCATOR, "16", "64", "30", "0", **limits)
    modest = _container("main", "batchmark-runner:test", ALLOCATOR, "16", "4", "0", "0", **limits)
    _create(kube_cluster, kube_namespace, _pod("greedy", [greedy]))
    _create(kube_cluster, kube_namespace, _pod("modest", [modest]))

    def finished(name: str) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            pod = _read(kube_cluster, kube_namespace, name)
            return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

        return probe

    pod = wait_for("the greedy pod to end", finished("greedy"))
    assert pod["status"]["phase"] == "Failed"
    terminated = _container_status(pod, "main")["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    held = [int(line) for line in kube_cluster.kubectl("logs", "-n", kube_namespace, "greedy").stdout.split()]
    assert 64 <= max(held) < 512, held
    pod = wait_for("the modest pod to end", finished("modest"))
    assert pod["status"]["phase"] == "Succeeded"
    terminated = _container_status(pod, "main")["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("Completed", 0)


@pytest.mark.cluster
def test_an_oom_killed_container_restarts_with_back_off(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    greedy = _container(
        "main",
        "batchmark-runner:test",
        ALLOCATOR,
        *("16", "64", "30", "0"),
        resources={"limits": {"memory": "96Mi"}},
    )
    _create(kube_cluster, kube_namespace, _pod("relapsing", [greedy], restart_policy="OnFailure"))

    def restarted() -> dict[str, Any] | None:
        statuses = _read(kube_cluster, kube_namespace, "relapsing")["status"].get("containerStatuses", [])
        return next(
            (status for status in statuses if status["restartCount"] >= 1 and status["lastState"].get("terminated")),
            None,
        )

    last = wait_for("a restart after the OOM kill", restarted)["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{kube_namespace}/pods/relapsing")
