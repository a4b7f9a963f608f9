"""A benchmark deleted and applied again at once, several together: the new one never takes the old one's
Job, pod, ConfigMaps, ServiceAccount or Role while the garbage collector is still removing them; it runs its
own, to the end, and reports its own results.

On an idle cluster the garbage collector is often done before the new benchmark's children are made; a
finalizer of the test's own holds each old Job (and so its running pod) for a while, as a busy garbage
collector or a slow API server would."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
import yaml

from batchmark.operator.controller.children import Owner
from tests.integration.operator.conftest import (
    benchmark,
    example,
    kubectl_apply,
    wait_for_phase,
)
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

AGAIN = 5
HOLD = "test.batchmark.dev/hold"
HELD_SECONDS = 15


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    """The simulated-throughput example as BatchBenchmark ``name``, its spec changed by ``spec``."""
    changed = example("simulated-throughput.yaml", name=name)
    changed["spec"].update(spec)
    return changed


def controller(found: dict[str, Any]) -> str:
    (reference,) = [entry for entry in found["metadata"].get("ownerReferences") or [] if entry.get("controller")]
    return str(reference["uid"])


def test_a_benchmark_applied_again_at_once_never_adopts_the_old_ones_children(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    names = [f"again-{index}" for index in range(AGAIN)]
    slow = {"constraints": [{"kind": "max_duration", "seconds": 120}], "profile": {"kind": "constant", "rate": 10}}
    applied = kubectl_apply(cluster, kube_namespace, yaml.safe_dump_all([manifest(name, **slow) for name in names]))
    assert applied.returncode == 0, applied.stderr
    old_uids = {}
    for name in names:
        running = wait_for_phase(cluster, kube_namespace, name, {"Running"}, 240)
        old_uids[name] = running["metadata"]["uid"]

    jobs = f"/apis/batch/v1/namespaces/{kube_namespace}/jobs"
    for name in names:
        hold = {"metadata": {"finalizers": [HOLD]}}
        cluster.request("PATCH", f"{jobs}/{name}", hold, "application/merge-patch+json")

    # Deleted, and applied again at once, each: the old Job, pod and the rest are still there.
    again = {"constraints": [{"kind": "max_requests", "count": 25}]}
    for name in names:
        cluster.kubectl("delete", "bb", name, "-n", kube_namespace, "--wait=false")

        def reapplied(name: str = name) -> subprocess.CompletedProcess[str] | None:
            result = kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest(name, **again)))
            return result if result.returncode == 0 else None  # e.g. "object is being deleted" for a moment

        wait_for(f"{name} applied again", reapplied, 60)

    # While the old Jobs are held: the new benchmarks show nothing of them (their pods run on).
    held_until = time.monotonic() + HELD_SECONDS
    while time.monotonic() < held_until:
        for name in names:
            found = benchmark(cluster, kube_namespace, name)
            status = found.get("status") or {}
            assert status.get("phase") in (None, "Pending"), (name, status)
            assert "podName" not in status, (name, status)
            assert controller(cluster.request("GET", f"{jobs}/{name}")) == old_uids[name]
        time.sleep(1)
    for name in names:
        release = [{"op": "remove", "path": "/metadata/finalizers"}]
        cluster.request("PATCH", f"{jobs}/{name}", release, "application/json-patch+json")

    core = f"/api/v1/namespaces/{kube_namespace}"
    for name in names:
        found = wait_for_phase(cluster, kube_namespace, name, {"Succeeded", "Failed", "Cancelled"}, 300)
        uid = found["metadata"]["uid"]
        assert uid != old_uids[name]
        status = found["status"]
        assert status["phase"] == "Succeeded", (name, status)
        assert status["results"][0]["requests"]["completed"] == 25, (name, status["results"])  # its own run
        job = cluster.request("GET", f"/apis/batch/v1/namespaces/{kube_namespace}/jobs/{name}")
        assert controller(job) == uid, name
        pod = cluster.request("GET", f"{core}/pods/{status['podName']}")
        assert controller(pod) == job["metadata"]["uid"], name
        owner = Owner(kube_namespace, name, uid)
        assert pod["spec"]["serviceAccountName"] == owner.runner
        (config,) = [volume for volume in pod["spec"]["volumes"] if volume["name"] == "config"]
        assert config["configMap"]["name"] == owner.config_map
        results = cluster.request("GET", f"{core}/configmaps/{status['resultsConfigMap']}")
        assert [reference["uid"] for reference in results["metadata"]["ownerReferences"]] == [uid]
    assert benchmark(cluster, kube_namespace, names[0])["metadata"]["uid"] != old_uids[names[0]]
