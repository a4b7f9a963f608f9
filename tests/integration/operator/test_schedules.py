"""The chart's scheduled benchmarks (values.schedules) on real kubelets over containerd: the CronJob's pod, in the
operator's image as built and under the chart's least-privilege account, creates a BatchBenchmark with a fresh
name that the operator then runs; triggered by hand (`kubectl create job --from=cronjob/...`, as users do), not by
waiting for the clock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import assert_succeeds_with_results
from tests.integration.operator.installed import InstalledOperator
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

SCHEDULE = "smoke"


def scheduled(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    listed = cluster.kubectl("get", "bb", "-n", namespace, "-l", f"batchmark.dev/schedule={SCHEDULE}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return items


def test_a_scheduled_run_creates_a_benchmark_the_operator_runs(
    batchmark_operator: InstalledOperator, container_namespace: str
) -> None:
    cluster, namespace = batchmark_operator.cluster, container_namespace
    benchmark = {
        "backend": {"model": "Qwen/Qwen3-0.6B", "engine": "simulated", "simulation": {"timeScale": 0}},
        "data": {"kind": "synthetic_text", "promptTokens": 32, "outputTokens": 8},
        "profile": {"kind": "throughput", "maxConcurrency": 16},
        "constraints": [{"kind": "max_requests", "count": 32}],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    schedule = {"name": SCHEDULE, "schedule": "0 3 * * *", "namespace": namespace, "benchmark": benchmark}
    try:
        with batchmark_operator.reconfigured({"schedules": [schedule]}):
            cron_jobs = json.loads(cluster.kubectl("get", "cronjobs", "-n", namespace, "-o", "json").stdout)["items"]
            (cron_job,) = [item["metadata"]["name"] for item in cron_jobs]
            for run in ("by-hand-1", "by-hand-2"):
                created = cluster.kubectl(
                    "create", "job", run, f"--from=cronjob/{cron_job}", "-n", namespace, check=False
                )
                assert created.returncode == 0, created.stderr
            wait_for("two scheduled benchmarks", lambda: len(scheduled(cluster, namespace)) == 2, 180)
            names = sorted(item["metadata"]["name"] for item in scheduled(cluster, namespace))
            assert all(name.startswith(f"{SCHEDULE}-") and len(name) == len(SCHEDULE) + 6 for name in names), names
            assert names[0] != names[1]
            for name in names:
                assert_succeeds_with_results(cluster, namespace, name)
            # The account may create benchmarks and nothing else.
            account = f"system:serviceaccount:{namespace}:{cron_job}"
            for verb, allowed in (("create", "yes"), ("get", "no"), ("delete", "no"), ("list", "no")):
                answer = cluster.kubectl(
                    "auth", "can-i", verb, "batchbenchmarks", "-n", namespace, "--as", account, check=False
                )
                assert answer.stdout.strip() == allowed, (verb, answer.stdout, answer.stderr)
            answer = cluster.kubectl("auth", "can-i", "create", "pods", "-n", namespace, "--as", account, check=False)
            assert answer.stdout.strip() == "no"
    finally:
        cluster.kubectl("delete", "bb", "-n", namespace, "-l", f"batchmark.dev/schedule={SCHEDULE}", check=False)
