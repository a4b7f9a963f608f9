"""A run's fingerprint: the workload two runs must share to be compared, apart from the stack that served it."""

from __future__ import annotations

import re
from typing import Any

from batchmark.runner.results.fingerprint import fingerprint, workload_differences
from batchmark.runner.results.htmlreport.render import render_report
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


DIGEST = "sha256:" + "ab12" * 16


def imaged(report: RunReport, reference: str, digest: str) -> RunReport:
    """The report as the status writer leaves it in a BatchBenchmark's pod: its image in the environment."""
    image = {"image": reference, "imageID": f"{reference}@{digest}", "digest": digest}
    return report.model_copy(update={"environment": {**report.environment, "image": image}})


def test_the_runner_image_is_the_stack_not_the_workload() -> None:
    """Two builds of the runner image on one workload are comparable: that is the regression question."""
    report = simple_report()
    assert fingerprint(report).stack["image"] is None  # outside a pod the run knows no image
    first = fingerprint(imaged(report, "registry.example/batchmark-runner:1.0", DIGEST))
    second = fingerprint(imaged(report, "registry.example/batchmark-runner:1.1", "sha256:" + "cd34" * 16))
    assert first.stack["image"] == {"reference": "registry.example/batchmark-runner:1.0", "digest": DIGEST}
    assert first.key == second.key == fingerprint(report).key
    assert workload_differences(first, second) == []


def test_the_html_report_shows_the_image_beside_the_fingerprint() -> None:
    report = simple_report()
    page = render_report(imaged(report, "registry.example/batchmark-runner:1.0", DIGEST))
    (line,) = re.findall(r'<div class="meta fingerprint">.*?</div>', page)
    assert f"image <code>registry.example/batchmark-runner:1.0</code> <code>{DIGEST}</code>" in line
    (line,) = re.findall(r'<div class="meta fingerprint">.*?</div>', render_report(report))
    assert "image" not in line
