"""Writes a run's report to files, the format chosen by each file's extension."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from batchmark.runner.config.safeload import load_json, load_yaml
from batchmark.runner.results.benchmark_report import benchmark_report_text
from batchmark.runner.results.htmlreport.render import render_report
from batchmark.runner.results.report import Distributions, RunReport

_CSV_EXCLUDED: dict[str, Any] = {
    "timeline": True,
    "samples": True,
    "batch_size_histogram": True,
    "distributions": {name: {"cdf"} for name in Distributions.model_fields},
    "sketches": True,
    # Each replica's figures are the JSON's; a row keeps their spread.
    "replicas": True,
    "replica_summary": {"output_tokens_per_second": {"cdf"}},
}


_RUN_COLUMNS = ("name", "run_id", "engine", "model", "batch_size")


def write_report(report: RunReport, path: Path) -> None:
    """Write atomically: a reader never sees half a file, and a failed write leaves the old one."""
    suffix = path.suffix.lower()
    # The llm-d Benchmark Report's names end in a plain suffix too (Path("x.br.json").suffix is ".json").
    name = path.name.lower()
    if name.endswith((".br.yaml", ".br.yml")):
        text = benchmark_report_text(report, "yaml")
    elif name.endswith(".br.json"):
        text = benchmark_report_text(report, "json")
    elif suffix == ".json":
        text = report.model_dump_json(indent=2)
    elif suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(report.model_dump(mode="json"), sort_keys=False)
    elif suffix == ".csv":
        text = report_csv(report)
    elif suffix == ".html":
        text = render_report(report)
    else:
        raise ValueError(f"{path}: unknown output format {suffix!r}")
    write_atomically(path, text)


def write_atomically(path: Path, text: str) -> None:
    """Through a hidden partial file renamed into place; a failure leaves neither a partial file nor half a
    file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_reports(report: RunReport, paths: Sequence[Path]) -> dict[Path, str]:
    """Write every output; one that fails never keeps the others from being written. Returns the failures,
    each with its reason."""
    failures: dict[Path, str] = {}
    for path in paths:
        try:
            write_report(report, path)
        except OSError as error:
            failures[path] = error.strerror or str(error)
        except Exception as error:  # a format that cannot render this report must not cost the others
            failures[path] = f"{type(error).__name__}: {error}"
    return failures


# What `run` writes has no aliases; a results file whose aliases multiply it more than this is not one.
REPORT_EXPANSION = 4


def load_report(path: Path) -> RunReport:
    """A results file as `run --output` wrote it; DocumentError (a ValueError) for YAML aliases that would expand
    it past a few times its size, or a key given twice."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        data: Any = load_yaml(text, REPORT_EXPANSION * len(text) + 2**20)
    else:
        data = load_json(text)
    return RunReport.model_validate(data)


_CSV_REPEATED_EXCLUDED = {"benchmarks", "swept", "strategy", "point", "batch_size"}


def report_csv(report: RunReport) -> str:
    """One row per benchmark, columns flattened with dots (distributions.request_latency.p99, ...)."""
    rows = []
    repeated_of = {index: entry for entry in report.repeated or [] for index in entry.benchmarks}
    for index, benchmark in enumerate(report.benchmarks):
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
        entry = repeated_of.get(index)
        if entry is not None:
            # Each repeat's row carries its benchmark's figures over all the repeats.
            row.update(_flatten(entry.model_dump(mode="json", exclude=_CSV_REPEATED_EXCLUDED), "repeated."))
        rows.append(row)
    buffer = io.StringIO()
    # A run that ended before its first benchmark still writes the header, so the file reads as a table.
    # The union of the rows' columns: a repeat cut short carries no figures over repeats.
    columns = list(dict.fromkeys(column for row in rows for column in row)) if rows else list(_RUN_COLUMNS)
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
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
