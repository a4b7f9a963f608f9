"""A benchmark over several pods: the other pods hand their reports to pod 0 over HTTP (on 127.0.0.1 here), and
pod 0 alone writes the status, with their reports merged; never an aggregate over fewer pods than there are."""

from __future__ import annotations

import gzip
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import pytest

from batchmark.runner import contract
from batchmark.runner.observe.members import ReportGatherer, send_report
from batchmark.runner.observe.statuswriter import StatusTarget, StatusWriter
from batchmark.runner.results.report import RunReport
from tests.unit.runner.observe.test_status_writer import RecordingApi
from tests.unit.runner.results.test_merge import run


class CreatingApi(RecordingApi):
    """RecordingApi that also records the ConfigMaps created."""

    def __init__(self) -> None:
        super().__init__()
        self.config_maps: list[str] = []

    def create_config_map(self, target: StatusTarget, name: str, body: Any) -> str:
        self.config_maps.append(name)
        return name


LOCAL = ("127.0.0.1", 0)


def target(member: int, members: int, leader: str | None = "127.0.0.1") -> StatusTarget:
    pod = f"bb-runner-{member}-0-abcde"
    return StatusTarget("team", "bb", "uid-1", f"{pod}-results", pod, None, member, members, leader)


def test_the_membership_comes_from_the_environment_and_a_wrong_one_is_refused() -> None:
    identity = {"BATCHMARK_RESOURCE_NAMESPACE": "ns", "BATCHMARK_RESOURCE_NAME": "bb", "BATCHMARK_POD_NAME": "p"}
    alone = StatusTarget.from_environment(identity)
    assert alone is not None
    assert (alone.member, alone.members, alone.leader, alone.writes_status) == (0, 1, None, True)
    member = {contract.ENV_MEMBER: "2", contract.ENV_MEMBERS: "3", contract.ENV_LEADER: "bb-runner-0-0.bb"}
    third = StatusTarget.from_environment({**identity, **member})
    assert third is not None
    assert (third.member, third.members, third.leader, third.writes_status) == (2, 3, "bb-runner-0-0.bb", False)
    with pytest.raises(ValueError, match="must lie in"):
        StatusTarget.from_environment({**identity, **member, contract.ENV_MEMBER: "3"})


def test_pod_0_merges_the_other_pods_reports_and_writes_them_as_the_benchmarks() -> None:
    first, second, third = (run(1000.0 + i, 10, 400, [0.1, 0.2], f"run{i}") for i in range(3))
    leader_api = CreatingApi()
    leader = StatusWriter(target(0, 3), api_factory=lambda: leader_api, member_address=LOCAL)
    assert leader._gatherer is not None
    port = leader._gatherer.port
    senders = [
        threading.Thread(target=send_report, args=("127.0.0.1", index, report, 30.0, port))
        for index, report in ((1, second), (2, third))
    ]
    for sender in senders:
        sender.start()
    leader.on_run_end(first)
    for sender in senders:
        sender.join()
    assert leader_api.config_maps == ["bb-runner-0-0-abcde-results", "bb-runner-0-0-abcde-results-merged"]
    final = leader_api.status_patches[-1]
    assert final["resultsConfigMap"] == "bb-runner-0-0-abcde-results-merged"
    assert final["runId"] not in ("run0", "run1", "run2")
    [result] = final["results"]
    assert result["replicas"] == 3
    # Three runs of 1600 output tokens/s each, over the 8 s they all measured.
    assert result["outputTokensPerSecond"] == pytest.approx(4800, rel=0.02)


def test_without_every_pods_report_pod_0_writes_no_results() -> None:
    leader_api = CreatingApi()
    leader = StatusWriter(target(0, 3), api_factory=lambda: leader_api, member_address=LOCAL, member_waits=(60, 1))
    assert leader._gatherer is not None
    assert send_report("127.0.0.1", 1, run(1001.0, 10, 400, [0.1], "run1"), 30.0, leader._gatherer.port)
    stopped = run(1000.0, 10, 400, [0.1], "run0").model_copy(update={"complete": False})
    leader.on_run_end(stopped)  # pod 2's report never comes: pod 0 waits the stopped run's bound (1 s), then gives up
    assert leader_api.config_maps == ["bb-runner-0-0-abcde-results"]  # its own report, kept
    assert all("results" not in patch for patch in leader_api.status_patches)


def test_the_other_pods_send_their_report_and_write_no_status() -> None:
    gatherer = ReportGatherer(2, port=0, host="127.0.0.1")
    api = CreatingApi()
    member = StatusWriter(target(1, 2), api_factory=lambda: api, member_address=LOCAL, member_waits=(1, 1))
    report = run(1000.0, 5, 40, [0.1], "run1")
    try:
        # The progress of pod 1 is pod 0's to write: nothing is queued.
        member._queue({"progress": {}}, urgent=True)
        sent = threading.Thread(target=send_report, args=("127.0.0.1", 1, report, 10.0, gatherer.port))
        sent.start()
        sent.join()
        assert gatherer.wait(5.0) == {1: report}
        member.on_run_end(
            report
        )  # its own ConfigMap; its report goes to pod 0 (where nothing listens: logged after 1 s)
    finally:
        gatherer.close()
    assert api.config_maps == ["bb-runner-1-0-abcde-results"]
    assert api.status_patches == []


def test_pod_0_refuses_what_is_not_another_pods_report() -> None:
    gatherer = ReportGatherer(3, port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{gatherer.port}"
    try:
        for path, body, code in (
            ("/reports/0", gzip.compress(b"{}"), 400),  # pod 0 is itself
            ("/reports/3", gzip.compress(b"{}"), 400),  # no such pod
            ("/reports/1", b"not gzip", 400),
            ("/reports/1", gzip.compress(b'{"not": "a report"}'), 400),
            ("/elsewhere", b"x", 404),
        ):
            request = urllib.request.Request(url + path, data=body, method="PUT")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == code, path
        assert gatherer.wait(0.1) == {}
        report: RunReport = run(1000.0, 5, 40, [0.1], "run1")
        assert send_report("127.0.0.1", 1, report, 5.0, gatherer.port)
        assert gatherer.wait(1.0) == {1: report}
    finally:
        gatherer.close()


def test_where_engines_span_pods_only_each_engine_s_node_0_reports() -> None:
    two_engines = replace(target(0, 4), engine_nodes=2)  # members 0 and 2 run the benchmark; 1 and 3 are workers
    assert list(two_engines.reporting) == [0, 2]
    leader_api = CreatingApi()
    leader = StatusWriter(two_engines, api_factory=lambda: leader_api, member_address=LOCAL)
    assert leader._gatherer is not None
    port = leader._gatherer.port
    for worker in (1, 3):  # a worker pod's index is no report's
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/reports/{worker}", data=gzip.compress(b"{}"), method="PUT"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 400
    assert send_report("127.0.0.1", 2, run(1001.0, 10, 400, [0.1], "run2"), 30.0, port)
    leader.on_run_end(run(1000.0, 10, 400, [0.1], "run0"))
    assert leader_api.config_maps == ["bb-runner-0-0-abcde-results", "bb-runner-0-0-abcde-results-merged"]
    assert leader_api.status_patches[-1]["results"][0]["replicas"] == 2
    # One engine over two pods: its node 0 is the only pod that reports, and writes its results as a single pod's.
    one_engine = replace(target(0, 2), engine_nodes=2)
    api = CreatingApi()
    alone = StatusWriter(one_engine, api_factory=lambda: api, member_address=LOCAL)
    assert alone._gatherer is None
    alone.on_run_end(run(1000.0, 10, 400, [0.1], "run0"))
    assert api.config_maps == ["bb-runner-0-0-abcde-results"]
    assert api.status_patches[-1]["runId"] == "run0"
