"""A run as llm-d Benchmark Reports v0.2: valid against the published schema, the run's own figures, nothing made up."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from batchmark.runner.config.run import OUTPUT_EXTENSIONS
from batchmark.runner.results.benchmark_report import (
    SCHEMA_FILE,
    benchmark_report,
    benchmark_report_text,
    benchmark_reports,
    published_schema,
)
from batchmark.runner.results.outputs import write_report
from batchmark.runner.results.report import DataSummary, RunReport
from batchmark.runner.results.stats import Distribution, DistributionSummary
from tests.unit.observability_data import simple_report, sweep_report

# The units llm-d-benchmark's models allow each statistic (schema_v0_2.py's check_units), which its JSON Schema
# cannot say.
ALLOWED_UNITS = {
    "input_length": {"count"},
    "output_length": {"count"},
    "time_to_first_token": {"s", "ms"},
    "request_latency": {"s", "ms"},
    "time_per_output_token": {"s/token", "ms/token"},
    "normalized_time_per_output_token": {"s/token", "ms/token"},
    "inter_token_latency": {"s/token", "ms/token"},
    "input_token_rate": {"tokens/s"},
    "output_token_rate": {"tokens/s"},
    "total_token_rate": {"tokens/s"},
    "request_rate": {"queries/s"},
}
# BR0.2's names of the statistics batchmark computes: any other (p0p1, p1, p5, p10, p25, p75, mode) would be made up.
COMPUTED_STATISTICS = {"units", "mean", "stddev", "min", "p50", "p90", "p95", "p99", "p99p9", "max"}


def assert_valid_br02(document: dict[str, Any]) -> None:
    """Valid against the kept schema, with the units and timestamps its JSON Schema cannot check."""
    validator = jsonschema.Draft202012Validator(published_schema())
    errors = [f"{'.'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(document)]
    assert errors == []
    assert document["version"] == "0.2"
    performance = document["results"].get("request_performance", {})
    for part in ("aggregate", "time_series"):
        for group in performance.get(part, {}).values():
            for name, value in group.items():
                if isinstance(value, dict) and "units" in value:
                    assert value["units"] in ALLOWED_UNITS[name], name
    for stamp in timestamps(document):
        assert datetime.fromisoformat(stamp).tzinfo is not None, stamp


def timestamps(document: dict[str, Any]) -> list[str]:
    time = document["run"].get("time", {})
    stamps = [time[name] for name in ("start", "end") if name in time]
    series = document["results"].get("request_performance", {}).get("time_series", {})
    for group in series.values():
        stamps += [point["ts"] for data in group.values() for point in data["series"]]
    return stamps


def statistics_of(summary: DistributionSummary) -> dict[str, Any]:
    """What the document must say of a batchmark distribution."""
    return {
        "mean": summary.mean,
        "stddev": summary.std,
        "min": summary.min,
        "p50": summary.median,
        "p90": summary.p90,
        "p95": summary.p95,
        "p99": summary.p99,
        "p99p9": summary.p999,
        "max": summary.max,
    }


def all_statistics(node: Any) -> list[dict[str, Any]]:
    """Every statistics block in a document (a mapping with units and a mean)."""
    if isinstance(node, dict):
        found = [node] if {"units", "mean"} <= node.keys() else []
        return found + [block for value in node.values() for block in all_statistics(value)]
    if isinstance(node, list):
        return [block for value in node for block in all_statistics(value)]
    return []


def on_vllm(report: RunReport, **vllm_config: Any) -> RunReport:
    """The report as if vLLM had run it on GPUs, with these engine arguments."""
    backend = {**report.config["backend"], "engine": "vllm", "vllm_config": vllm_config}
    engine = report.engine.model_copy(
        update={"kind": "vllm", "simulated": False, "version": "0.32.0", "gpu_name": "NVIDIA H100 80GB HBM3"}
    )
    return report.model_copy(update={"engine": engine, "config": {**report.config, "backend": backend}})


def summary(*values: float) -> DistributionSummary:
    distribution = Distribution()
    for value in values:
        distribution.add(value)
    return distribution.summary()


def test_a_run_of_one_benchmark_is_one_valid_document_of_its_figures() -> None:
    report = simple_report()
    [document] = benchmark_reports(report)
    assert_valid_br02(document)
    assert benchmark_report(report) == document
    result = report.benchmarks[0]
    aggregate = document["results"]["request_performance"]["aggregate"]
    assert aggregate["requests"] == {
        "total": result.requests.completed + result.requests.errored + result.requests.incomplete,
        "failures": result.requests.errored,
        "incomplete": result.requests.incomplete,
        "input_length": {"units": "count", **statistics_of(result.distributions.prompt_tokens)},
        "output_length": {"units": "count", **statistics_of(result.distributions.output_tokens)},
    }
    assert aggregate["latency"]["request_latency"] == {
        "units": "s",
        **statistics_of(result.distributions.request_latency),
    }
    assert aggregate["throughput"] == {
        "input_token_rate": {"units": "tokens/s", "mean": result.throughput.prompt_tokens_per_second},
        "output_token_rate": {"units": "tokens/s", "mean": result.throughput.output_tokens_per_second},
        "total_token_rate": {"units": "tokens/s", "mean": result.throughput.total_tokens_per_second},
        "request_rate": {"units": "queries/s", "mean": result.throughput.requests_per_second},
    }
    queue_wait = document["results"]["observability"]["batchmark_queue_wait"]
    assert queue_wait == {"units": "s", **statistics_of(result.distributions.queue_wait)}
    run = document["run"]
    assert (run["uid"], run["eid"]) == ("abc123-0", "abc123")
    assert datetime.fromisoformat(run["time"]["start"]).timestamp() == result.started_at
    assert datetime.fromisoformat(run["time"]["end"]).timestamp() == result.started_at + result.duration
    assert run["time"]["duration"] == "PT3S"
    load = document["scenario"]["load"]["standardized"]
    assert (load["tool"], load["tool_version"], load["source"], load["stage"]) == ("batchmark", "0.0.test", "random", 0)
    assert load["concurrency"] == 8
    assert "rate_qps" not in load


def test_what_batchmark_does_not_measure_is_left_out_not_estimated() -> None:
    document = benchmark_report(simple_report())
    blocks = all_statistics(document)
    assert blocks
    for block in blocks:
        assert block.keys() <= COMPUTED_STATISTICS, block.keys() - COMPUTED_STATISTICS
    latency = document["results"]["request_performance"]["aggregate"]["latency"]
    assert "inter_token_latency" not in latency
    assert "normalized_time_per_output_token" not in latency
    # These batches carry no engine timings: no TTFT and no TPOT were measured, so none is given.
    assert "time_to_first_token" not in latency
    assert "time_per_output_token" not in latency
    assert "null" not in yaml.safe_dump(document["results"])


def test_the_timeline_becomes_rates_at_each_bucket_start() -> None:
    report = simple_report()
    result = report.benchmarks[0]
    throughput = benchmark_report(report)["results"]["request_performance"]["time_series"]["throughput"]
    expected = {
        "output_token_rate": [bucket.output_tokens / bucket.width for bucket in result.timeline],
        "input_token_rate": [bucket.prompt_tokens / bucket.width for bucket in result.timeline],
        "request_rate": [bucket.completed / bucket.width for bucket in result.timeline],
    }
    for name, values in expected.items():
        assert [point["value"] for point in throughput[name]["series"]] == values, name
    starts = [datetime.fromisoformat(point["ts"]).timestamp() for point in throughput["request_rate"]["series"]]
    assert starts == pytest.approx([result.started_at + bucket.start for bucket in result.timeline])
    assert sum(point["value"] for point in throughput["request_rate"]["series"]) > 0


def test_a_simulated_run_says_so_and_a_vllm_run_does_not() -> None:
    simulated = benchmark_report(simple_report())
    engine = simulated["scenario"]["stack"][0]
    assert engine["standardized"]["tool"] == "batchmark-simulated"
    assert engine["native"]["config"]["simulated"] is True
    assert "simulated engine" in engine["metadata"]["description"]
    assert "not measured on a GPU" in simulated["run"]["description"]

    real = benchmark_report(on_vllm(simple_report()))
    assert_valid_br02(real)
    engine = real["scenario"]["stack"][0]
    assert (engine["standardized"]["tool"], engine["standardized"]["tool_version"]) == ("vllm", "0.32.0")
    assert engine["native"]["config"]["simulated"] is False
    assert "simulation" not in engine["native"]["config"]
    assert "simulated" not in real["run"]["description"]
    assert "simulated" not in engine["metadata"]["description"]


def test_the_stack_is_the_model_the_device_and_the_parallelism() -> None:
    report = on_vllm(simple_report(), tensor_parallel_size=2, pipeline_parallel_size=2, max_num_seqs=64)
    report = report.model_copy(
        update={"config": {**report.config, "backend": {**report.config["backend"], "replicas": 3}}}
    )
    engine = benchmark_report(report)["scenario"]["stack"][0]
    assert engine["standardized"]["model"] == {"name": "tiny/model"}
    assert engine["standardized"]["replicas"] == 3
    # As llm-d-benchmark's own reports: the accelerators of one replica, beside the replica count.
    assert engine["standardized"]["accelerator"] == {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 4,
        "parallelism": {"tp": 2, "pp": 2},
    }
    assert engine["native"]["args"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "max_num_seqs": 64}
    assert engine["native"]["config"]["batch_size"] == 4
    on_cpu = report.model_copy(update={"engine": report.engine.model_copy(update={"gpu_name": "cpu"})})
    accelerator = benchmark_report(on_cpu)["scenario"]["stack"][0]["standardized"]["accelerator"]
    assert (accelerator["model"], accelerator["count"]) == ("cpu", 0)


def test_a_sweep_is_one_document_per_benchmark_in_the_run_order() -> None:
    report = sweep_report()
    documents = benchmark_reports(report)
    assert len(documents) == len(report.benchmarks) == 3
    for index, (document, result) in enumerate(zip(documents, report.benchmarks, strict=True)):
        assert_valid_br02(document)
        assert document["run"]["uid"] == f"abc123-{index}"
        assert document["run"]["eid"] == "abc123"
        assert document["scenario"]["load"]["standardized"]["stage"] == index
        assert result.strategy in document["run"]["description"]
        aggregate = document["results"]["request_performance"]["aggregate"]
        assert aggregate["throughput"]["output_token_rate"]["mean"] == result.throughput.output_tokens_per_second
        assert aggregate["requests"]["failures"] == result.requests.errored
        assert datetime.fromisoformat(document["run"]["time"]["start"]).timestamp() == result.started_at
    assert [document["scenario"]["load"]["standardized"].get("rate_qps") for document in documents] == [None, 5.0, 9.0]
    assert documents[2]["results"]["request_performance"]["aggregate"]["requests"]["failures"] == 1


def test_each_document_has_its_sweep_points_settings() -> None:
    report = on_vllm(sweep_report(), max_num_seqs=8)
    points = [{"vllm_config.max_num_seqs": 8, "batch_size": 2}, {"vllm_config.max_num_seqs": 16, "batch_size": 4}]
    benchmarks = [
        result.model_copy(update={"swept": swept, "point": index})
        for index, (result, swept) in enumerate(zip(report.benchmarks, points, strict=False))
    ]
    documents = benchmark_reports(report.model_copy(update={"benchmarks": benchmarks}))
    engines = [document["scenario"]["stack"][0] for document in documents]
    assert [engine["native"]["args"]["max_num_seqs"] for engine in engines] == [8, 16]
    assert [engine["native"]["config"]["batch_size"] for engine in engines] == [2, 4]
    assert engines[0]["metadata"]["cfg_id"] != engines[1]["metadata"]["cfg_id"]
    assert "vllm_config.max_num_seqs=16" in documents[1]["run"]["description"]
    assert report.config["backend"]["vllm_config"] == {"max_num_seqs": 8}  # the run's own config untouched


def test_the_data_describes_the_workload_and_the_enforced_output_lengths() -> None:
    data = DataSummary(
        kind="sharegpt",
        source="conversations.json",
        samples=3,
        output_lengths_from="records",
        forced_output_lengths=True,
        prompt_tokens=summary(10, 20, 30),
        output_tokens=summary(5, 5, 5),
    )
    report = simple_report().model_copy(update={"data": data})
    document = benchmark_report(report)
    assert_valid_br02(document)
    load = document["scenario"]["load"]["standardized"]
    assert load["source"] == "sampled"
    assert load["input_seq_len"] == {
        "distribution": "other",
        "value": 20,
        "std_dev": data.prompt_tokens.std,
        "min": 10,
        "max": 30,
    }
    assert load["output_seq_len"] == {"distribution": "fixed", "value": 5, "min": 5, "max": 5}
    unforced = report.model_copy(update={"data": data.model_copy(update={"forced_output_lengths": False})})
    assert "output_seq_len" not in benchmark_report(unforced)["scenario"]["load"]["standardized"]


def test_a_run_that_ended_before_its_first_benchmark_still_describes_its_stack() -> None:
    report = simple_report().model_copy(update={"benchmarks": [], "complete": False})
    [document] = benchmark_reports(report)
    assert_valid_br02(document)
    assert document["results"] == {}
    assert document["run"]["time"] == {"start": report.created_at}
    assert "no benchmark ran" in document["run"]["description"]
    assert document["scenario"]["stack"][0]["standardized"]["model"] == {"name": "tiny/model"}
    assert "load" not in document["scenario"]  # no prompt was measured, and BR0.2 requires its length


def test_the_file_is_a_yaml_stream_or_in_json_the_document_or_a_list_of_them() -> None:
    one, sweep = simple_report(), sweep_report()
    assert list(yaml.safe_load_all(benchmark_report_text(one, "yaml"))) == benchmark_reports(one)
    assert list(yaml.safe_load_all(benchmark_report_text(sweep, "yaml"))) == benchmark_reports(sweep)
    assert json.loads(benchmark_report_text(one, "json")) == benchmark_report(one)
    assert json.loads(benchmark_report_text(sweep, "json")) == benchmark_reports(sweep)


@pytest.mark.parametrize("name", ["run.br.yaml", "run.br.yml", "run.BR.YAML", "run.br.json", "run.Br.Json"])
def test_a_br_name_writes_benchmark_reports(tmp_path: Path, name: str) -> None:
    report = sweep_report()
    path = tmp_path / name
    write_report(report, path)
    text = path.read_text(encoding="utf-8")
    loaded = json.loads(text) if name.lower().endswith(".json") else list(yaml.safe_load_all(text))
    assert loaded == benchmark_reports(report)


def test_the_plain_names_still_write_the_run_report(tmp_path: Path) -> None:
    report = simple_report()
    write_report(report, tmp_path / "run.json")
    write_report(report, tmp_path / "run.yaml")
    assert RunReport.model_validate_json((tmp_path / "run.json").read_text()) == report
    assert yaml.safe_load((tmp_path / "run.yaml").read_text())["run_id"] == "abc123"


def test_the_br_names_are_output_extensions() -> None:
    assert {".br.yaml", ".br.json"} <= set(OUTPUT_EXTENSIONS)


def test_the_kept_schema_is_the_published_file_unchanged() -> None:
    """The package carries the schema byte for byte as its README records it."""
    schemas = resources.files("batchmark.runner.results").joinpath("schemas")
    content = schemas.joinpath(SCHEMA_FILE).read_bytes()
    readme = schemas.joinpath("README.md").read_text(encoding="utf-8")
    recorded = re.search(r"SHA-256\s+`([0-9a-f]{64})`", readme)
    assert recorded is not None
    assert hashlib.sha256(content).hexdigest() == recorded.group(1)
    assert published_schema()["title"] == "Benchmark Report v0.2"
    assert "Apache License" in schemas.joinpath("LICENSE").read_text(encoding="utf-8")
