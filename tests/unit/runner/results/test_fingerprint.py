"""A run's fingerprint: the workload two runs must share to be compared, apart from the stack that served it."""

from __future__ import annotations

from typing import Any

from batchmark.runner.results.fingerprint import fingerprint, workload_differences
from batchmark.runner.results.report import RunReport
from tests.unit.observability_data import simple_report


def changed(report: RunReport, section: str, **settings: Any) -> RunReport:
    config = {**report.config, section: {**report.config[section], **settings}}
    return report.model_copy(update={"config": config})


def test_the_stack_is_not_the_workload() -> None:
    """A vLLM upgrade, another batchmark or a slower simulated engine: the same workload, so comparable."""
    report = simple_report()
    upgraded = report.model_copy(
        update={
            "engine": report.engine.model_copy(update={"version": "0.33.0"}),
            "batchmark_version": "9.9",
            "run_id": "other",
            "name": "another-name",
        }
    )
    slower = changed(report, "backend", simulation={**report.config["backend"]["simulation"], "time_scale": 2.0})
    mine = fingerprint(report)
    for other in (upgraded, slower):
        theirs = fingerprint(other)
        assert theirs.key == mine.key
        assert workload_differences(mine, theirs) == []
    assert fingerprint(upgraded).stack["engine_version"] == "0.33.0"


def test_what_the_workload_is_made_of_changes_the_key_and_is_named() -> None:
    report = simple_report()
    mine = fingerprint(report)
    cases = {
        "data.prompt_tokens": changed(report, "data", prompt_tokens=999),
        "profile.max_concurrency": changed(report, "profile", max_concurrency=3),
        "backend.batch_size": changed(report, "backend", batch_size=3),
        "backend.vllm_config.tensor_parallel_size": changed(report, "backend", vllm_config={"tensor_parallel_size": 2}),
        "model": changed(report, "backend", model="other/model"),
        "hardware.gpu_name": report.model_copy(
            update={"engine": report.engine.model_copy(update={"gpu_name": "NVIDIA A100"})}
        ),
    }
    for path, other in cases.items():
        theirs = fingerprint(other)
        assert theirs.key != mine.key, path
        differences = workload_differences(mine, theirs)
        assert any(difference.startswith(f"{path}: ") for difference in differences), differences
    doubled = fingerprint(cases["backend.vllm_config.tensor_parallel_size"]).workload
    assert doubled["hardware"]["gpus"] == 2
    assert doubled["parallelism"]["tensor_parallel_size"] == 2
