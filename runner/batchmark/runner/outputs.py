"""Writes a run's report to files, the format chosen by each file's extension."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import yaml

from batchmark.runner.htmlreport.render import render_report
from batchmark.runner.results import Distributions, RunReport

_CSV_EXCLUDED: dict[str, Any] = {
    "timeline": True,
    "samples": True,
    "batch_size_histogram": True,
    "distributions": {name: {"cdf"} for name in Distributions.model_fields},
}


def write_report(report: RunReport, path: Path) -> None:
    """Write atomically: a reader never sees half a file, and a failed write leaves the old one."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        text = report.model_dump_json(indent=2)
    elif suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(report.model_dump(mode="json"), sort_keys=False)
    elif suffix == ".csv":
        text = report_csv(report)
    elif suffix == ".html":
        text = render_report(report)
    else:
        raise ValueError(f"{path}: unknown output format {suffix!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def load_report(path: Path) -> RunReport:
    text = path.read_text(encoding="utf-8")
    data: Any = yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml") else json.loads(text)
    return RunReport.model_validate(data)


def report_csv(report: RunReport) -> str:
    """One row per benchmark, columns flattened with dots (distributions.request_latency.p99, ...)."""
    rows = []
    for benchmark in report.benchmarks:
        row: dict[str, Any] = {
            "name": report.name,
            "run_id": report.run_id,
            "engine": report.engine.kind,
            "model": report.engine.model,
            "batch_size": benchmark.batch_size or report.config["backend"]["batch_size"],
        }
        # One row of scalars: the series kept for charts (timeline, CDF points, batch-size histogram) stay out.
        data = benchmark.model_dump(mode="json", exclude=_CSV_EXCLUDED)
        if benchmark.slo is not None:
            # One column pair per target instead of a list in a cell.
            data["slo"]["targets"] = {
                target.name: {"observed": target.observed, "met": target.met} for target in benchmark.slo.targets
            }
        row.update(_flatten(data))
        rows.append(row)
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
