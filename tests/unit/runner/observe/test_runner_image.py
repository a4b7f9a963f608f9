"""The runner's image in its report: in a BatchBenchmark's pod the status writer reads status.runnerImage (the
operator's, from the kubelet's report) back into the report before it is judged and written; a failed read leaves
the image unknown and never fails the run."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import GROUP, KIND, PLURAL, VERSION
from batchmark.runner.observe.statuswriter import StatusApi, StatusTarget, StatusWriter
from batchmark.runner.results.fingerprint import fingerprint
from batchmark.runner.results.report import RunReport
from batchmark.runner.run.benchmark import BenchmarkRunner
from batchmark.runner.run.events import RunObserver
from tests.unit.observability_data import simple_report

POD = "qwen3-abcde"
IMAGE = "localhost/batchmark-runner:test"
DIGEST = "sha256:" + "ab12" * 16
WRITTEN = {"image": IMAGE, "imageID": f"{IMAGE}@{DIGEST}", "podName": POD}


class CustomObjects:
    """The client's CustomObjectsApi as the API server answers a read of the status subresource: the whole
    object, its status among its fields."""

    def __init__(self, status: Mapping[str, Any], uid: str = "uid-1") -> None:
        self.resource = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": "qwen3", "namespace": "team", "uid": uid, "resourceVersion": "7"},
            "spec": {"backend": {"model": "Qwen/Qwen3-0.6B"}},
            "status": dict(status),
        }
        self.reads: list[tuple[str, ...]] = []

    def get_namespaced_custom_object_status(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        self.reads.append((group, version, namespace, plural, name))
        return self.resource


class ClusterApi(StatusApi):
    """StatusApi's own read_status, over the fake client instead of a cluster's."""

    def __init__(self, custom: CustomObjects) -> None:
        self.custom = cast(Any, custom)


class RefusingApi(StatusApi):
    """An API server that refuses every call (a Role without the right, say)."""

    def __init__(self) -> None:
        self.reads = 0

    def read_status(self, target: StatusTarget) -> dict[str, Any]:
        self.reads += 1
        raise ApiException(status=403, reason="Forbidden")

    def patch_status(self, target: StatusTarget, body: Mapping[str, Any]) -> None:
        raise ApiException(status=403, reason="Forbidden")

    def create_config_map(self, target: StatusTarget, name: str, body: Mapping[str, Any]) -> str:
        raise ApiException(status=403, reason="Forbidden")


def writer(api: StatusApi, pod: str | None = POD) -> StatusWriter:
    target = StatusTarget("team", "qwen3", "uid-1", f"{pod}-results" if pod else None, pod, None)
    return StatusWriter(target, api_factory=lambda: api, retry_delays=())


def finished(status_writer: StatusWriter, report: RunReport) -> RunReport:
    try:
        return status_writer.finish_report(report)
    finally:
        status_writer.close()


def test_the_pods_image_goes_into_the_report_and_its_fingerprint() -> None:
    custom = CustomObjects({"phase": "Running", "podName": POD, "runnerImage": WRITTEN})
    report = simple_report()
    imaged = finished(writer(ClusterApi(custom)), report)
    assert custom.reads == [(GROUP, VERSION, "team", PLURAL, "qwen3")]
    assert imaged.environment == {
        **report.environment,
        "image": {"image": IMAGE, "imageID": f"{IMAGE}@{DIGEST}", "digest": DIGEST},
    }
    assert fingerprint(imaged).stack["image"] == {"reference": IMAGE, "digest": DIGEST}
    assert fingerprint(imaged).key == fingerprint(report).key  # another image, the same workload


@pytest.mark.parametrize(
    ("status", "uid", "pod"),
    [
        ({"phase": "Running"}, "uid-1", POD),  # the operator has not written it (yet)
        ({"runnerImage": {**WRITTEN, "podName": "qwen3-old"}}, "uid-1", POD),  # a retry's earlier pod
        ({"runnerImage": {"image": 3}}, "uid-1", POD),  # written by someone else, wrongly
        ({"runnerImage": WRITTEN}, "uid-2", POD),  # another resource of the same name
        ({"runnerImage": WRITTEN}, "uid-1", None),  # a runner started by hand: not on the pod's kubelet
    ],
)
def test_no_image_of_this_pod_leaves_the_image_unknown(status: dict[str, Any], uid: str, pod: str | None) -> None:
    report = simple_report()
    assert finished(writer(ClusterApi(CustomObjects(status, uid)), pod), report) == report


def test_a_failed_read_is_logged_once_and_leaves_the_report_as_it_was(caplog: pytest.LogCaptureFixture) -> None:
    report = simple_report()
    with caplog.at_level(logging.WARNING, logger="batchmark.runner.observe.statuswriter"):
        assert finished(writer(RefusingApi()), report) == report
    (said,) = caplog.messages
    assert said.startswith("could not read the runner image of qwen3")

    def unreachable() -> StatusApi:
        raise RuntimeError("no cluster configuration")

    target = StatusTarget("team", "qwen3", "uid-1", None, POD, None)
    assert finished(StatusWriter(target, api_factory=unreachable, retry_delays=()), report) == report


class Heard(RunObserver):
    """The run's ends it heard of, and how often the refusing API had been read by then."""

    def __init__(self, refusing: RefusingApi | None = None) -> None:
        self.refusing = refusing
        self.reports: list[RunReport] = []
        self.reads_before_the_end: list[int] = []

    def on_run_end(self, report: RunReport) -> None:
        self.reports.append(report)
        if self.refusing is not None:
            self.reads_before_the_end.append(self.refusing.reads)


def simulated_config() -> RunConfig:
    return RunConfig.model_validate(
        {
            "backend": {"model": "m", "engine": "simulated"},
            "data": {"prompt_tokens": 16, "output_tokens": 8},
            "profile": {"kind": "throughput"},
            "constraints": [{"kind": "max_requests", "count": 10}],
        }
    )


def test_a_failed_read_never_fails_the_run() -> None:
    """The run's end with a status writer whose every call is refused: the report comes back, its image unknown,
    and the observers still hear of the run's end (no engine loads: the run ends before it)."""
    refusing = RefusingApi()
    heard = Heard(refusing)
    # The writer last: it reads the status again for its own results patch once it hears of the end.
    report = BenchmarkRunner(simulated_config(), [heard, writer(refusing)]).run()
    assert heard.reads_before_the_end == [1]
    assert "image" not in report.environment
    assert heard.reports == [report]
    assert fingerprint(report).stack["image"] is None


def test_outside_a_pod_the_runner_has_no_writer_and_its_report_no_image() -> None:
    assert StatusWriter.from_environment({}) is None
    heard = Heard()
    report = BenchmarkRunner(simulated_config(), [heard]).run()
    assert "image" not in report.environment
    assert heard.reports == [report]


def test_in_a_pod_the_runs_report_carries_its_image_before_anyone_hears_of_its_end() -> None:
    heard = Heard()
    custom = CustomObjects({"runnerImage": WRITTEN})
    report = BenchmarkRunner(simulated_config(), [writer(ClusterApi(custom)), heard]).run()
    assert report.environment["image"]["digest"] == DIGEST
    assert heard.reports == [report]
