"""The real helm (built by scripts/setup/cluster.sh) over charts/batchmark, for tests that need no cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster.controlplane import cache_directory, helm_version

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "batchmark"
VALUES = Path(__file__).resolve().parent / "values"
RELEASE = "batchmark"
NAMESPACE = "batchmark"
# What kube-prometheus-stack's CRDs add to a cluster's API.
MONITORING_APIS = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)


def helm_binary() -> Path:
    binary = cache_directory() / f"helm-{helm_version()}" / "helm"
    if not os.access(binary, os.X_OK):
        message = f"helm is not built ({binary}): run scripts/setup/cluster.sh"
        if os.environ.get("BATCHMARK_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def helm(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binary()), *arguments], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def template_arguments(
    values: list[Path] | None = None, sets: list[str] | None = None, monitoring: bool = False
) -> list[str]:
    arguments = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values or []:
        arguments += ["--values", str(path)]
    for assignment in sets or []:
        arguments += ["--set", assignment]
    if monitoring:
        for api in MONITORING_APIS:
            arguments += ["--api-versions", api]
    return arguments


def render(
    values: list[Path] | None = None, sets: list[str] | None = None, monitoring: bool = False, tests: bool = True
) -> list[dict[str, Any]]:
    """The chart's manifests as helm renders them (with the test hook unless tests=False)."""
    arguments = template_arguments(values, sets, monitoring)
    if not tests:
        arguments.append("--skip-tests")
    result = helm(*arguments)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def find(documents: list[dict[str, Any]], kind: str, name_suffix: str = "") -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
