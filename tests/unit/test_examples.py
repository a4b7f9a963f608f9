"""Every example manifest is a valid BatchBenchmark for the operator's models (the cluster test applies them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from batchmark.operator.api import BatchBenchmarkSpec
from batchmark.operator.children import Owner, job

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_is_a_valid_batchbenchmark(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        assert document["kind"] == "BatchBenchmark"
        spec = BatchBenchmarkSpec.model_validate(document["spec"])
        spec.run_config(document["metadata"]["name"])
        job(Owner("ns", document["metadata"]["name"], "uid"), spec)


def test_the_tensor_parallel_example_asks_for_four_gpus() -> None:
    (document,) = yaml.safe_load_all((EXAMPLES[0].parent / "qwen3-32b-tensor-parallel.yaml").read_text())
    spec = BatchBenchmarkSpec.model_validate(document["spec"])
    container = job(Owner("ns", "x", "uid"), spec)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}  # never the first pod evicted
    assert {"name": "HF_HOME", "value": "/models"} in container["env"]
