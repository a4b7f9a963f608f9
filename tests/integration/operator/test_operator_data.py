"""The user's prompts in the cluster: a ConfigMap mounted by spec.dataVolume, read by the runner in the pod with
the same requests (content hash, lengths) as on a laptop; a missing column fails the benchmark as InvalidConfig
before the engine loads, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CoreV1Api, V1ConfigMap, V1ObjectMeta

from batchmark.runner.observe.statuswriter import read_report_config_map
from batchmark.runner.results.outputs import load_report
from tests.cli import run_in_process
from tests.integration.operator.conftest import example, kubectl_apply, wait_for_phase
from tests.integration.operator.installed import InstalledOperator

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

ROWS = [
    {"prompt": f"summarise document {index} " * (1 + index % 3), "output_tokens_count": 2 + index % 4}
    for index in range(12)
]
JSONL = "".join(json.dumps(row) + "\n" for row in ROWS)
SIMULATION = {"timeScale": 0.0}


def manifest(name: str, data: dict[str, Any]) -> dict[str, Any]:
    document = example("simulated-throughput.yaml", name=name)
    spec = document["spec"]
    spec["backend"]["simulation"] = SIMULATION
    spec["data"] = data
    spec["constraints"] = [{"kind": "max_requests", "count": 24}]
    spec["sampleRequests"] = 24
    spec["dataVolume"] = {"configMap": "prompts"}
    return document


def test_a_config_map_of_prompts_runs_the_same_requests_as_on_a_laptop(
    batchmark_operator: InstalledOperator, kube_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = batchmark_operator.cluster
    core = CoreV1Api(cluster.api_client())
    core.create_namespaced_config_map(
        kube_namespace, V1ConfigMap(metadata=V1ObjectMeta(name="prompts"), data={"prompts.jsonl": JSONL})
    )
    data = {"kind": "file", "path": "prompts.jsonl", "shuffle": True, "seed": 3, "samples": 8}
    result = kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest("own-prompts", data)))
    assert result.returncode == 0, result.stderr
    found = wait_for_phase(cluster, kube_namespace, "own-prompts", {"Succeeded", "Failed"})
    assert found["status"]["phase"] == "Succeeded", found["status"]
    # The runner creates the results ConfigMap and names it in the status.
    results_name = found["status"]["resultsConfigMap"]
    in_pod = read_report_config_map(core.read_namespaced_config_map(results_name, kube_namespace).to_dict())
    assert in_pod is not None
    assert in_pod.data is not None

    # The same spec on a laptop, the file in the working folder.
    (tmp_path / "prompts.jsonl").write_text(JSONL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "laptop.json"
    spec = found["spec"]
    config = {"backend": spec["backend"], "data": data, "profile": spec["profile"]}
    config.update(constraints=spec["constraints"], sampleRequests=24, outputs=[str(output)])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    laptop_run = run_in_process(["run", "--quiet", "--config", str(tmp_path / "run.yaml")])
    assert laptop_run.code == 0, laptop_run.stderr
    laptop = load_report(output)
    assert laptop.data is not None
    assert in_pod.data.content_hash == laptop.data.content_hash
    assert in_pod.data.samples == laptop.data.samples == 8

    def requests(report: Any) -> dict[int, tuple[int, int]]:
        return {s.request_id: (s.prompt_tokens, s.output_tokens) for s in report.benchmarks[0].samples}

    assert requests(in_pod) == requests(laptop)


def test_an_unknown_column_fails_as_invalid_config_naming_it(
    batchmark_operator: InstalledOperator, kube_namespace: str
) -> None:
    cluster = batchmark_operator.cluster
    CoreV1Api(cluster.api_client()).create_namespaced_config_map(
        kube_namespace, V1ConfigMap(metadata=V1ObjectMeta(name="prompts"), data={"prompts.jsonl": JSONL})
    )
    data = {"kind": "file", "path": "prompts.jsonl", "promptColumn": "question"}
    result = kubectl_apply(cluster, kube_namespace, yaml.safe_dump(manifest("wrong-column", data)))
    assert result.returncode == 0, result.stderr
    failed = wait_for_phase(cluster, kube_namespace, "wrong-column", {"Succeeded", "Failed"})
    assert failed["status"]["phase"] == "Failed", failed["status"]
    assert failed["status"]["reason"] == "InvalidConfig", failed["status"]
    message = failed["status"]["message"]
    for named in ("prompt_column", "'question'", "prompt, output_tokens_count"):
        assert named in message, message
