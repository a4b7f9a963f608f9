"""status.runnerImage: the operator copies the runner container's image and imageID from its pod's status (the
runner cannot learn its digest in the pod), once the current pod reports them."""

from __future__ import annotations

from typing import Any

import pytest

from batchmark.operator.controller.status import JobView, Observation, PodView, build_status
from batchmark.operator.resource.api import BatchBenchmarkStatus
from batchmark.runner.contract import OPERATOR_STATUS_FIELDS, check_status_writes
from batchmark.runner.statusfields import RunnerImageStatus

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
DIGEST = "sha256:" + "ab12" * 16
IMAGE = "localhost/batchmark-runner:test"


def pod(name: str, phase: str, created: str = T0, **container: Any) -> dict[str, Any]:
    """A pod of the benchmark's Job as the API server returns it, its runner container's status as the kubelet
    writes it (image and imageID once the container runtime has the image)."""
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"nodeName": "gpu-node-0"},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "sidecar", "image": "other:1", "imageID": "sha256:" + "00" * 32, "state": {}},
                {"name": "runner", **container},
            ],
        },
    }


def job(**status: Any) -> JobView:
    return JobView.from_dict({"metadata": {"name": "bb", "creationTimestamp": T0}, "status": status})


def update(pods: list[dict[str, Any]], **stored: Any) -> dict[str, Any]:
    observation = Observation(
        generation=1, cancel=False, status=stored, job=job(active=1), pods=[PodView.from_dict(each) for each in pods]
    )
    return build_status(observation, timestamp=T1).fields


def test_the_pod_view_reads_the_runner_containers_image_and_image_id() -> None:
    running = PodView.from_dict(pod("bb-1", "Running", image=IMAGE, imageID=f"{IMAGE}@{DIGEST}", state={"running": {}}))
    assert (running.image, running.image_id) == (IMAGE, f"{IMAGE}@{DIGEST}")
    # Before the runtime has the image the kubelet reports an empty imageID: no image yet.
    pulling = PodView.from_dict(
        pod("bb-1", "Pending", image=IMAGE, imageID="", state={"waiting": {"reason": "ContainerCreating"}})
    )
    assert (pulling.image, pulling.image_id) == (IMAGE, None)


def test_the_status_names_the_current_pods_image_once_it_reports_one() -> None:
    fields = update([pod("bb-1", "Running", image=IMAGE, imageID=DIGEST, state={"running": {}})])
    assert fields["runnerImage"] == {"image": IMAGE, "imageID": DIGEST, "podName": "bb-1"}
    check_status_writes("operator", fields, OPERATOR_STATUS_FIELDS)
    # As the CRD's schema describes it.
    written = BatchBenchmarkStatus.model_validate({"runnerImage": fields["runnerImage"]}).runner_image
    assert written is not None
    assert written.digest == DIGEST
    assert "runnerImage" not in update([pod("bb-1", "Pending", image=IMAGE, imageID="", state={"waiting": {}})])


def test_a_retrys_pod_that_waits_for_its_image_leaves_the_earlier_pods() -> None:
    earlier = {"image": IMAGE, "imageID": DIGEST, "podName": "bb-1"}
    failed = pod("bb-1", "Failed", image=IMAGE, imageID=DIGEST, state={"terminated": {"exitCode": 1}})
    waiting = pod("bb-2", "Pending", created=T1, image=IMAGE, imageID="", state={"waiting": {}})
    fields = update([failed, waiting], phase="Running", runnerImage=earlier)
    assert "runnerImage" not in fields  # a merge patch without it keeps the stored one, which names its pod
    started = pod("bb-2", "Running", created=T1, image=IMAGE, imageID="sha256:" + "cd34" * 16, state={"running": {}})
    assert update([failed, started], phase="Running", runnerImage=earlier)["runnerImage"]["podName"] == "bb-2"


@pytest.mark.parametrize(
    ("image_id", "digest"),
    [
        (DIGEST, DIGEST),  # containerd, an image imported into the node: its image ID
        (f"{IMAGE}@{DIGEST}", DIGEST),  # containerd, an image pulled from a registry
        (f"docker-pullable://registry.example/runner@{DIGEST}", DIGEST),
        (f"docker://{DIGEST}", DIGEST),
        ("sha256:not-hex", None),
        ("", None),
    ],
)
def test_the_digest_is_read_from_each_form_of_image_id(image_id: str, digest: str | None) -> None:
    assert RunnerImageStatus(image=IMAGE, image_id=image_id, pod_name="bb-1").digest == digest
