"""The runner's status writer against the real API server: a conflicting write is retried, nothing is lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from batchmark.runner.observe.statuswriter import StatusApi, StatusTarget, StatusWriter
from batchmark.runner.statusfields import parse_summary
from tests.integration.operator.conftest import benchmark, example, kubectl_apply, wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.unit.runner.results.test_summary import sweep_report

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_a_conflicting_status_write_is_retried(
    batchmark_operator: InstalledOperator, kube_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = batchmark_operator.cluster
    # Cancelled from the start: the operator makes no Job, so this test is the only runner writing.
    manifest = example("simulated-throughput.yaml", name="conflicted")
    manifest["spec"]["cancel"] = True
    assert kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest)).returncode == 0
    found = wait_for_phase(cluster, kube_namespace, "conflicted", {"Cancelled"}, 60)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    admin = CustomObjectsApi(cluster.api_client())
    conflicts: list[int] = []

    class AnotherWriterInBetween(StatusApi):
        """After the writer reads the resource, someone else writes it: its version is stale, the API says 409."""

        def read_status(self, target: StatusTarget) -> dict[str, Any]:
            current = super().read_status(target)
            if not conflicts:
                admin.patch_namespaced_custom_object_status(
                    "batchmark.dev", "v1alpha1", kube_namespace, "batchbenchmarks", "conflicted",
                    {"status": {"progress": {"benchmark": 9}}}, _content_type="application/merge-patch+json",
                )  # fmt: skip
            return current

        def patch_status(self, target: StatusTarget, body: Any) -> None:
            try:
                super().patch_status(target, body)
            except ApiException as error:
                conflicts.append(error.status)
                raise

    termination = tmp_path / "termination-log"
    target = StatusTarget(
        namespace=kube_namespace,
        name="conflicted",
        uid=found["metadata"]["uid"],
        results_config_map=None,
        pod_name=None,
        termination_message_path=termination,
    )
    writer = StatusWriter(target, api_factory=AnotherWriterInBetween)
    report = sweep_report(3)
    writer.on_run_end(report)

    assert conflicts == [409]
    status = benchmark(cluster, kube_namespace, "conflicted")["status"]
    assert [entry["strategy"] for entry in status["results"]] == [b.strategy for b in report.benchmarks]
    assert status["runId"] == report.run_id
    assert status["phase"] == "Cancelled"  # the operator's fields are untouched
    summary = parse_summary(termination.read_text())
    assert summary is not None
    assert summary.run_id == report.run_id
