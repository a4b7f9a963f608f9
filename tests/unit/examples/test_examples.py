"""Every example manifest is a valid BatchBenchmark for the operator's models (the cluster test applies them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.operator.controller.children import Owner, job, workload
from batchmark.operator.resource.api import BatchBenchmarkSpec

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def benchmarks(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d["kind"] == "BatchBenchmark"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_is_a_valid_batchbenchmark(path: Path) -> None:
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert {document["kind"] for document in documents} <= {"BatchBenchmark", "PersistentVolumeClaim"}
    for document in benchmarks(path):
        spec = BatchBenchmarkSpec.model_validate(document["spec"])
        spec.run_config(document["metadata"]["name"])
        job(Owner("ns", document["metadata"]["name"], "uid"), spec)
    assert benchmarks(path)


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_an_example_needs_nothing_it_does_not_create(path: Path) -> None:
    """Applied as it is, an example runs: every claim it mounts is in the same file (ReadWriteMany, for benchmarks
    on several nodes at once), and it names no Secret, Kueue queue or other object a user would have to make
    first."""
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    claims = {d["metadata"]["name"]: d for d in documents if d["kind"] == "PersistentVolumeClaim"}
    for document in benchmarks(path):
        spec = BatchBenchmarkSpec.model_validate(document["spec"])
        store = spec.results.store if spec.results is not None else None
        for claim_name in (volume.claim_name for volume in (spec.model_cache, store) if volume is not None):
            claim = claims.get(claim_name)
            assert claim is not None, f"{path.name}: claim {claim_name!r} is not created in the file"
            assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert spec.hf_token_secret is None
        assert not spec.env_from
        assert not spec.image_pull_secrets
        assert spec.queue_name is None  # examples/kueue/ holds the queued one, with its queues


def test_the_regression_example_keeps_its_runs_and_judges_them_against_the_last() -> None:
    (document,) = benchmarks(EXAMPLES[0].parent / "qwen3-0.6b-regression.yaml")
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    config = spec.run_config(document["metadata"]["name"])
    assert config.store is not None
    assert config.store.endswith("/qwen3")
    assert config.baseline == "last"
    assert config.repeats >= 3


def test_the_tensor_parallel_example_asks_for_four_gpus() -> None:
    (document,) = benchmarks(EXAMPLES[0].parent / "qwen3-32b-tensor-parallel.yaml")
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    container = job(Owner("ns", "x", "uid"), spec)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}  # never the first pod evicted
    assert {"name": "HF_HOME", "value": "/models"} in container["env"]


def test_the_first_example_is_a_one_load_batch_size_sweep_with_a_budget_and_a_price() -> None:
    """The example the README and the chart's NOTES.txt apply first shows what no other tool does, and needs
    nothing the user has not got (no model-cache claim to create first)."""
    root = EXAMPLES[0].parents[1]
    first = "examples/qwen3-0.6b-batch-sizes.yaml"
    readme_applies = [
        line.split("-f ")[1].split()[0]
        for line in (root / "README.md").read_text().splitlines()
        if "kubectl apply -f examples/" in line
    ]
    notes_applies = [
        line.split("-f ")[1].split()[0]
        for line in (root / "charts" / "batchmark" / "templates" / "NOTES.txt").read_text().splitlines()
        if "kubectl apply -f examples/" in line
    ]
    assert readme_applies[0] == notes_applies[0] == first
    (document,) = benchmarks(root / first)
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    assert spec.sweep is not None
    assert [name for name, _ in spec.sweep.axes()] == ["batch_size"]  # worker fields only: one engine load
    assert len(spec.sweep.batch_size or []) >= 4
    assert spec.slo
    assert spec.cost is not None
    assert spec.model_cache is None
    pod = job(Owner("ns", "x", "uid"), spec)["spec"]["template"]["spec"]
    assert not any("persistentVolumeClaim" in volume for volume in pod["volumes"])


def test_the_two_node_example_is_one_engine_over_a_jobset_of_two_8_gpu_pods() -> None:
    (document,) = benchmarks(EXAMPLES[0].parent / "llama-405b-two-nodes.yaml")
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    assert (spec.pods, spec.engine_nodes) == (2, 2)
    manifest = workload(Owner("ns", "x", "uid"), spec)
    assert manifest["kind"] == "JobSet"
    [replicated] = manifest["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 2
    [container] = replicated["template"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # TP 8 x PP 2 over the two nodes
