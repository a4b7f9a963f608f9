"""The runner's status writer, where it needs no cluster: switched on by the environment; the results ConfigMap."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes.client import V1ConfigMap, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from batchmark.runner import contract
from batchmark.runner.contract import COMPRESSED_REPORT_KEY, REPORT_KEY
from batchmark.runner.observe.statuswriter import (
    StatusApi,
    StatusTarget,
    StatusWriter,
    read_report_config_map,
    record_output_failure,
    report_config_map_data,
)
from batchmark.runner.statusfields import parse_summary
from tests.unit.runner.results.test_summary import sweep_report


def test_off_without_the_resources_identity() -> None:
    assert StatusWriter.from_environment({}) is None
    target = StatusTarget.from_environment(
        {
            "BATCHMARK_RESOURCE_NAMESPACE": "ns",
            "BATCHMARK_RESOURCE_NAME": "bb",
            "BATCHMARK_RESOURCE_UID": "u",
            "BATCHMARK_TERMINATION_MESSAGE_PATH": "/dev/termination-log",
        }
    )
    assert target is not None
    assert (target.namespace, target.name, target.uid) == ("ns", "bb", "u")
    assert target.termination_message_path == Path("/dev/termination-log")
    assert target.results_config_map is None  # no pod name: nowhere to write a report of its own


def test_what_could_not_be_written_after_the_run_goes_into_the_termination_message(tmp_path: Path) -> None:
    """The operator's reason for a pod that exited 4: the summary the status writer left, and what failed."""
    message = tmp_path / "termination-log"
    pod = {
        "BATCHMARK_RESOURCE_NAMESPACE": "ns",
        "BATCHMARK_RESOURCE_NAME": "bb",
        "BATCHMARK_TERMINATION_MESSAGE_PATH": str(message),
    }
    report = sweep_report(3)
    record_output_failure(report, "--store: s3://b/p: cannot store the run: " + "x" * 5000, pod)
    summary = parse_summary(message.read_text())
    assert summary is not None
    assert summary.run_id == report.run_id
    assert len(summary.results) == 3
    assert summary.output_failure is not None
    assert summary.output_failure.startswith("--store: s3://b/p: cannot store the run: x")
    assert len(message.read_bytes()) <= 4096
    # On a laptop, or a pod given no termination message path: nothing is written, nothing fails.
    record_output_failure(report, "--store: failed", {})
    record_output_failure(report, "--store: failed", {key: pod[key] for key in list(pod)[:2]})
    record_output_failure(report, "--store: failed", {**pod, "BATCHMARK_TERMINATION_MESSAGE_PATH": str(tmp_path)})


def test_each_pod_creates_a_results_config_map_of_its_own() -> None:
    """Each attempt (pod) of a benchmark keeps its report: the runner creates, and never changes, a ConfigMap."""
    identity = {"BATCHMARK_RESOURCE_NAMESPACE": "ns", "BATCHMARK_RESOURCE_NAME": "bb", "BATCHMARK_POD_NAME": "bb-x7k2q"}
    target = StatusTarget.from_environment(identity)
    assert target is not None
    assert target.results_config_map == "bb-x7k2q-results"
    chosen = StatusTarget.from_environment({**identity, "BATCHMARK_RESULTS_CONFIGMAP": "mine"})
    assert chosen is not None
    assert chosen.results_config_map == "mine"


def test_the_report_goes_plain_when_it_fits_and_compressed_when_not() -> None:
    report = sweep_report(3)
    plain = report_config_map_data(report)
    assert REPORT_KEY in plain["data"]
    assert read_report_config_map(plain) == report
    squeezed = report_config_map_data(report, limit=len(report.model_dump_json()) - 1)
    assert COMPRESSED_REPORT_KEY in squeezed["binaryData"]
    assert read_report_config_map(squeezed) == report
    assert read_report_config_map({"data": {}}) is None


class RecordingApi(StatusApi):
    """The writer's three calls, recorded instead of sent (the real API server: tests/integration/operator)."""

    def __init__(self) -> None:
        self.status_patches: list[dict[str, Any]] = []

    def read_status(self, target: StatusTarget) -> dict[str, Any]:
        return {"metadata": {"uid": target.uid, "resourceVersion": "1"}}

    def patch_status(self, target: StatusTarget, body: Mapping[str, Any]) -> None:
        self.status_patches.append(dict(body["status"]))

    def patch_config_map(self, target: StatusTarget, name: str, body: Mapping[str, Any]) -> None:
        pass


def test_the_writer_writes_only_the_runners_status_fields() -> None:
    api = RecordingApi()
    writer = StatusWriter(StatusTarget("team", "qwen3", "uid-1", None, None, None), api_factory=lambda: api)
    writer.on_run_end(sweep_report(2))
    assert api.status_patches
    assert all(patch.keys() <= contract.RUNNER_STATUS_FIELDS for patch in api.status_patches)
    # A write to one of the operator's fields is refused before it reaches the API server (and logged).
    assert not writer._attempt("the phase", lambda each: writer._patch_status(each, {"phase": "Running"}))
    assert all("phase" not in patch for patch in api.status_patches)


class ConfigMapsOfTakenNames:
    """The API server's ConfigMaps where the results ConfigMap's name is taken already: a create by that name is
    answered 409; one by generateName gets a name of its own."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> V1ConfigMap:
        metadata = body["metadata"]
        if "name" in metadata:
            raise ApiException(status=409, reason="Conflict")
        self.created.append(body)
        return V1ConfigMap(metadata=V1ObjectMeta(name=metadata["generateName"] + "x7k2p", namespace=namespace))


class NameTakenApi(RecordingApi):
    def __init__(self) -> None:
        super().__init__()
        self.config_maps = ConfigMapsOfTakenNames()
        self.core = cast(Any, self.config_maps)


def test_a_taken_results_name_is_never_taken_for_the_runs_own() -> None:
    """A 409 does not say whose the ConfigMap is (the runner may read none): the report goes into one the API
    server names, and the status names that one."""
    api = NameTakenApi()
    target = StatusTarget("team", "qwen3", "uid-1", "qwen3-abcde-results", "qwen3-abcde", None)
    writer = StatusWriter(target, api_factory=lambda: api, retry_delays=())
    report = sweep_report(2)
    writer.on_run_end(report)
    (created,) = api.config_maps.created
    assert created["metadata"]["generateName"] == "qwen3-abcde-results-"
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "batchmark.dev/v1alpha1", "kind": "BatchBenchmark", "name": "qwen3", "uid": "uid-1"}
    ]
    assert read_report_config_map(created) == report
    assert api.status_patches[-1]["resultsConfigMap"] == "qwen3-abcde-results-x7k2p"
