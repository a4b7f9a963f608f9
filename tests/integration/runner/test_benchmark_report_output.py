"""`batchmark run -o NAME.br.yaml` (or .br.json) on the simulated engine: llm-d Benchmark Reports v0.2 of the run's
own figures, beside the run's own results file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.runner.results.report import RunReport
from tests.cli import run_in_process
from tests.integration.runner.harness import run_args
from tests.unit.runner.results.test_benchmark_report import assert_valid_br02, statistics_of

pytestmark = pytest.mark.integration


def run(tmp_path: Path, extra: list[str] = ()) -> tuple[RunReport, list[dict[str, Any]], Any]:  # type: ignore[assignment]
    """The run's own results, its documents from the YAML file, and the JSON file as read."""
    outputs = [tmp_path / "run.json", tmp_path / "run.br.yaml", tmp_path / "run.br.json"]
    finished = run_in_process(run_args(outputs=outputs, extra=list(extra)))
    assert finished.code == 0, finished.stderr
    report = RunReport.model_validate_json(outputs[0].read_text(encoding="utf-8"))
    documents = list(yaml.safe_load_all(outputs[1].read_text(encoding="utf-8")))
    return report, documents, json.loads(outputs[2].read_text(encoding="utf-8"))


def test_a_run_writes_one_valid_document_of_its_figures(tmp_path: Path) -> None:
    report, documents, from_json = run(tmp_path)
    [document] = documents
    assert from_json == document
    assert_valid_br02(document)
    result = report.benchmarks[0]
    aggregate = document["results"]["request_performance"]["aggregate"]
    assert aggregate["requests"]["total"] == result.requests.completed == 40
    assert aggregate["throughput"]["output_token_rate"]["mean"] == result.throughput.output_tokens_per_second
    assert aggregate["throughput"]["request_rate"]["mean"] == result.throughput.requests_per_second
    # The simulated engine gives engine timings: TTFT and TPOT are measured, and mapped.
    for name, units in (("request_latency", "s"), ("time_to_first_token", "s"), ("time_per_output_token", "s/token")):
        assert aggregate["latency"][name] == {"units": units, **statistics_of(getattr(result.distributions, name))}
    load = document["scenario"]["load"]["standardized"]
    assert load["input_seq_len"] == {"distribution": "fixed", "value": 64, "min": 64, "max": 64}
    assert load["output_seq_len"] == {"distribution": "fixed", "value": 16, "min": 16, "max": 16}
    assert document["run"]["eid"] == report.run_id
    engine = document["scenario"]["stack"][0]
    assert engine["standardized"]["tool"] == "batchmark-simulated"
    assert engine["standardized"]["accelerator"]["model"] == report.engine.gpu_name
    assert "not measured on a GPU" in document["run"]["description"]


def test_a_sweep_writes_one_document_per_benchmark(tmp_path: Path) -> None:
    report, documents, from_json = run(
        tmp_path, ["--sweep", "batch_size=2,4", "--sweep", "vllm_config.max_num_seqs=8,16"]
    )
    assert len(documents) == len(report.benchmarks) == 4
    assert from_json == documents
    for index, (document, result) in enumerate(zip(documents, report.benchmarks, strict=True)):
        assert_valid_br02(document)
        assert document["scenario"]["load"]["standardized"]["stage"] == index
        engine = document["scenario"]["stack"][0]
        assert engine["native"]["args"]["max_num_seqs"] == result.swept["vllm_config.max_num_seqs"]
        assert engine["native"]["config"]["batch_size"] == result.swept["batch_size"]
        throughput = document["results"]["request_performance"]["aggregate"]["throughput"]
        assert throughput["total_token_rate"]["mean"] == result.throughput.total_tokens_per_second
    assert len({document["run"]["uid"] for document in documents}) == 4
    assert {document["run"]["eid"] for document in documents} == {report.run_id}
