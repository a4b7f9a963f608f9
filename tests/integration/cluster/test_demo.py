"""`make demo` for real: devtools/cluster/demo brings up a control plane, installs the chart, applies the examples
that run here and a real vLLM benchmark on the CPU node (the CPU runner image), ends with every BatchBenchmark
Succeeded and prints the real one's results. It runs a vLLM engine: in the vLLM group (tests/xdist_scheduling.py),
one engine at a time. Beside them it runs a real S3 store (SeaweedFS on the pod network's gateway): a simulated
benchmark keeps its run there and is deleted, and the bucket still lists the run, to the demo and to this test;
devtools/cluster/down stops the store with the cluster."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from devtools.cluster.kubelets import recorded_pod_network
from tests.cli import command
from tests.cluster_fixtures import required_binaries
from tests.integration.runner.s3_fixtures import AWS_VARIABLES, aws_settings_of

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[3]
# The demo's benchmark kept in its S3 store, and the store.
STORED = "simulated-s3-store"
STORE_URL = "s3://batchmark-demo/runs"


def store_environment(env_file: Path, tmp_path: Path) -> dict[str, str]:
    """This process's environment with the machine's own AWS set-up removed and the demo's store's AWS_* variables
    (its RUN_DIR/s3.env, the lines users source) in their place."""
    exported = {}
    for line in env_file.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            exported[name] = value
    machine = {name: value for name, value in os.environ.items() if name not in AWS_VARIABLES}
    return {**machine, **aws_settings_of(exported, tmp_path)}


def processes_with(word: str) -> list[list[str]]:
    """The command lines of this machine's processes that have ``word`` as one of their arguments."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = [part.decode(errors="replace") for part in cmdline.read_bytes().split(b"\0") if part]
        except OSError:
            continue
        if word in words:
            found.append(words)
    return found


def test_the_demo_ends_with_every_example_succeeded(tmp_path: Path) -> None:
    binaries = required_binaries()
    run_directory = tmp_path / "demo"
    weed_address = ""
    store_folder = None
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
        # Either backend as a BatchBenchmark: the async one's status has what only a stream measures.
        by_name = {item["metadata"]["name"]: item for item in items}
        [streamed] = by_name["simulated-pair-async"]["status"]["results"]
        [batched] = by_name["simulated-pair-batch"]["status"]["results"]
        assert streamed["itlP50Seconds"] > 0
        assert streamed["ttftP50Seconds"] > 0
        assert batched.get("itlP50Seconds") is None
        # The real engine's benchmark ran, and `batchmark results` printed its summary.
        assert "cpu-real-engine" in phases
        assert "cpu-real-engine: /models/tiny on vllm" in demo.stdout, demo.stdout[-3000:]

        # The benchmark kept in the S3 store succeeded (the demo says its run), is gone, and the bucket lists its
        # run: in the demo's `batchmark history` after the deletion, and to this test from the same s3.env.
        assert STORED not in phases
        kept = re.search(rf"^{STORED}'s run: (\S+), kept in {re.escape(STORE_URL)}$", demo.stdout, re.MULTILINE)
        assert kept, demo.stdout[-3000:]
        run_id = kept.group(1)
        history = demo.stdout[kept.end() :].partition(f"batchmark history --store {STORE_URL}\n")[2]
        assert "1 stored run" in history, demo.stdout[-3000:]
        assert run_id in history, demo.stdout[-3000:]
        environment = store_environment(run_directory / "s3.env", tmp_path)
        listed = subprocess.run(
            command("history", "--store", STORE_URL, "--format", "csv"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=environment,
        )
        assert listed.returncode == 0, listed.stderr
        rows = list(csv.DictReader(io.StringIO(listed.stdout)))
        assert [(row["run_id"], row["simulated"], row["complete"]) for row in rows] == [(run_id, "True", "True")]
        # The server runs on the pod network's gateway, where the pods reached it; down must stop it and its weed.
        network = recorded_pod_network(run_directory)
        assert network is not None
        assert urllib.parse.urlsplit(environment["AWS_ENDPOINT_URL"]).hostname == network.gateway
        weed_address = f"-ip={network.gateway}"
        (weed,) = processes_with(weed_address)
        store_folder = Path(next(word for word in weed if word.startswith("-dir=")).removeprefix("-dir=")).parent
    finally:
        subprocess.run([str(ROOT / "devtools" / "cluster" / "down"), str(run_directory)], check=False, timeout=120)
    # The S3 server is the demo's, not the cluster's: down stopped it too (its weed in a session of its own), and
    # it removed its folder.
    assert not processes_with(weed_address)
    assert store_folder is not None
    assert not store_folder.exists()
