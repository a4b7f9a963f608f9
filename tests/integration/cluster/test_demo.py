"""`make demo` for real: devtools/cluster/demo brings up a control plane, installs the chart, applies the examples
that run here and a real vLLM benchmark on the CPU node (the CPU runner image), ends with every BatchBenchmark
Succeeded and prints the real one's results. It runs a vLLM engine: in the vLLM group (tests/xdist_scheduling.py),
one engine at a time."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster_fixtures import required_binaries

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[3]


def test_the_demo_ends_with_every_example_succeeded(tmp_path: Path) -> None:
    binaries = required_binaries()
    run_directory = tmp_path / "demo"
    try:
        demo = subprocess.run(
            [str(ROOT / "devtools" / "cluster" / "demo"), str(run_directory)],
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
            env={**os.environ, "DEMO_TIMEOUT": "600"},
        )
        assert demo.returncode == 0, demo.stdout[-5000:] + demo.stderr[-3000:]
        listed = subprocess.run(
            [
                str(binaries.kubectl),
                f"--kubeconfig={run_directory / 'admin.kubeconfig'}",
                *("get", "bb", "-A", "-o", "json"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        items = json.loads(listed.stdout)["items"]
        simulated = [
            path.name
            for path in sorted((ROOT / "examples").glob("*.yaml"))
            if "engine: simulated" in path.read_text() and "kind: BatchBenchmark" in path.read_text()
        ]
        assert simulated, "examples/ has no BatchBenchmark the demo can run"
        assert len(items) >= len(simulated)
        phases = {item["metadata"]["name"]: item["status"]["phase"] for item in items}
        assert set(phases.values()) == {"Succeeded"}, phases
        assert "NAME" in demo.stdout  # kubectl get bb printed its table
        # The real engine's benchmark ran, and `batchmark results` printed its summary.
        assert "cpu-real-engine" in phases
        assert "cpu-real-engine: /models/tiny on vllm" in demo.stdout, demo.stdout[-3000:]
    finally:
        subprocess.run([str(ROOT / "devtools" / "cluster" / "down"), str(run_directory)], check=False, timeout=120)
