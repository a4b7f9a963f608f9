"""The user's prompts from volumes, as a user's cluster serves them: a PersistentVolumeClaim bound to a local
PersistentVolume made here, mounted by spec.dataVolume, and a Hugging Face hub dataset in the datasets cache of the
spec.modelCache volume (HF_HOME), read offline. The operator's Job runs in the runner image on a real kubelet over
containerd (devtools/cluster, runtime="containers"), with the operator's securityContext.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api

from batchmark.runner.cli import main
from batchmark.runner.contract import RUNNER_GID, RUNNER_UID
from batchmark.runner.observe.statuswriter import read_report_config_map
from batchmark.runner.results.outputs import load_report
from batchmark.runner.results.report import RunReport
from devtools.cluster import images
from devtools.cluster.volumes import bind_local_volume, release_local_volume
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import example, kubectl_apply, wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.integration.runner.test_data_hub_cache import REPOSITORY, TRAIN, fill_hub_cache

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

ROWS = [
    {"prompt": f"summarise report {index}: " + "findings " * (1 + index % 5), "output_tokens_count": 2 + index % 3}
    for index in range(40)
]
JSONL = "".join(json.dumps(row) + "\n" for row in ROWS)
DATA_PATH = "nightly/prompts.jsonl"  # under the volume's mountPath


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A folder on this machine (every node's host) for a local PersistentVolume, owned by the runner's user:
    pytest's own temporary folders are closed to other users."""
    folder = Path(tempfile.mkdtemp(prefix="batchmark-volume-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def hand_to_the_runner(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, RUNNER_UID, RUNNER_GID)
        path.chmod(0o755 if path.is_dir() else 0o644)


def in_the_runner_image(name: str, data: dict[str, Any], **spec: Any) -> dict[str, Any]:
    manifest = example("simulated-throughput.yaml", name=name)
    manifest["spec"]["image"] = images.TAGS["runner"]
    manifest["spec"]["backend"]["simulation"] = {"timeScale": 0.0}
    manifest["spec"]["data"] = data
    manifest["spec"]["constraints"] = [{"kind": "max_requests", "count": 30}]
    manifest["spec"]["sampleRequests"] = 30
    manifest["spec"].update(spec)
    return manifest


def run_in_the_cluster(cluster: KubeCluster, namespace: str, manifest: dict[str, Any]) -> RunReport:
    name = manifest["metadata"]["name"]
    applied = kubectl_apply(cluster, namespace, yaml.safe_dump(manifest))
    assert applied.returncode == 0, applied.stderr
    found = wait_for_phase(cluster, namespace, name, {"Succeeded", "Failed"}, timeout_seconds=240)
    assert found["status"]["phase"] == "Succeeded", found["status"]
    config_map = CoreV1Api(cluster.api_client()).read_namespaced_config_map(
        found["status"]["resultsConfigMap"], namespace
    )
    report = read_report_config_map(config_map.to_dict())
    assert report is not None
    assert report.data is not None
    return report


def requests(report: RunReport) -> dict[int, tuple[int, int]]:
    return {s.request_id: (s.prompt_tokens, s.output_tokens) for s in report.benchmarks[0].samples}


def test_prompts_from_a_persistent_volume_claim_run_as_on_a_laptop(
    operator: InstalledOperator,
    container_namespace: str,
    host_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster, namespace, claim = operator.cluster, container_namespace, "prompts-corpus"
    (host_folder / DATA_PATH).parent.mkdir(parents=True)
    (host_folder / DATA_PATH).write_text(JSONL, encoding="utf-8")
    hand_to_the_runner(host_folder)
    bind_local_volume(cluster, namespace, claim, host_folder)
    try:
        data = {"kind": "file", "path": DATA_PATH, "shuffle": True, "seed": 11, "samples": 25}
        volume = {"claimName": claim, "mountPath": "/corpus"}
        in_pod = run_in_the_cluster(cluster, namespace, in_the_runner_image("from-a-claim", data, dataVolume=volume))
    finally:
        release_local_volume(cluster, namespace, claim)
    assert in_pod.data is not None
    assert in_pod.data.kind == "file"
    assert in_pod.data.source == DATA_PATH
    assert in_pod.data.samples == 25
    assert (in_pod.data.content_hash or "").startswith("sha256:")

    # The same data spec on a laptop, the relative path under the folder BATCHMARK_DATA_DIR names.
    monkeypatch.setenv("BATCHMARK_DATA_DIR", str(host_folder))
    output = tmp_path / "laptop.json"
    argv = ["run", "--quiet", "--backend", "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,engine=simulated,"]
    argv[-1] += "batch_size=16,simulation.time_scale=0"
    argv += ["--data", f"kind=file,path={DATA_PATH},shuffle=true,seed=11,samples=25", "--profile", "kind=throughput"]
    argv += ["--constraint", "kind=max_requests,count=30", "--sample-requests", "30", "--output", str(output)]
    assert main(argv) == 0
    laptop = load_report(output)
    assert laptop.data is not None
    assert in_pod.data.content_hash == laptop.data.content_hash
    assert requests(in_pod) == requests(laptop)


def test_a_hub_dataset_from_the_model_cache_is_read_offline(
    operator: InstalledOperator, container_namespace: str, host_folder: Path, tmp_path: Path
) -> None:
    cluster, namespace, claim = operator.cluster, container_namespace, "hub-cache"
    fill_hub_cache(host_folder, tmp_path / "downloaded")
    hand_to_the_runner(host_folder)  # the datasets library writes its lock files beside the cache
    bind_local_volume(cluster, namespace, claim, host_folder)
    try:
        data = {"kind": "dataset", "path": REPOSITORY, "config": "default", "promptColumn": "question"}
        data["outputTokensCountColumn"] = "answer_tokens"
        manifest = in_the_runner_image(
            "from-the-hub-cache",
            data,
            modelCache={"claimName": claim, "mountPath": "/hf"},
            env=[{"name": "HF_HUB_OFFLINE", "value": "1"}],
        )
        in_pod = run_in_the_cluster(cluster, namespace, manifest)
    finally:
        release_local_volume(cluster, namespace, claim)
    assert in_pod.data is not None
    assert (in_pod.data.kind, in_pod.data.source, in_pod.data.samples) == ("dataset", REPOSITORY, len(TRAIN))
    assert in_pod.data.output_lengths_from == "column 'answer_tokens'"
    for request_id, lengths in requests(in_pod).items():
        row = TRAIN[request_id % len(TRAIN)]
        assert lengths == (len(row["question"].encode()), row["answer_tokens"])
