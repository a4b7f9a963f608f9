"""The report page's repeats table: each benchmark's headline figures over its repeats, as mean [95% interval]."""

from __future__ import annotations

from collections.abc import Sequence

from batchmark.runner.results.report import Estimate, RunReport


def _shown(figure: Estimate | None, digits: str = ",.1f") -> str:
    if figure is None:
        return "-"
    if figure.low is None or figure.high is None:
        return format(figure.mean, digits)
    return f"{figure.mean:{digits}} [{figure.low:{digits}}, {figure.high:{digits}}]"


def repeated_rows(reports: Sequence[tuple[str, RunReport]]) -> list[dict[str, str]]:
    """One row per repeated benchmark of each run: throughput, goodput, cost and latency with their intervals."""
    rows = []
    for run_label, report in reports:
        for entry in report.repeated or []:
            row = {"run": run_label} if len(reports) > 1 else {}
            row.update({name: str(value) for name, value in entry.swept.items()})
            row.update(
                {
                    "benchmark": entry.strategy,
                    "n": str(entry.output_tokens_per_second.count),
                    "out tok/s": _shown(entry.output_tokens_per_second),
                    "req/s": _shown(entry.requests_per_second, ",.2f"),
                    "total tok/s": _shown(entry.total_tokens_per_second),
                    "goodput out tok/s": _shown(entry.goodput_output_tokens_per_second),
                    "cost / M out tok": _shown(entry.cost_per_million_output_tokens, ",.4g"),
                }
            )
            row.update({name: _shown(figure, ".4g") for name, figure in entry.latency.items()})
            rows.append(row)
    return rows


def repeated_notes(reports: Sequence[tuple[str, RunReport]]) -> list[str]:
    """How the intervals were computed, and the warning of a run with too few repeats."""
    notes = []
    for run_label, report in reports:
        prefix = f"{run_label}: " if len(reports) > 1 else ""
        methods = sorted(
            {
                method
                for entry in report.repeated or []
                for figure in (entry.output_tokens_per_second, entry.goodput_output_tokens_per_second)
                if figure is not None and (method := figure.interval_method) is not None
            }
        )
        if methods:
            notes.append(f"{prefix}95% confidence intervals: {'; '.join(methods)}")
        if report.repeats_warning is not None:
            notes.append(prefix + report.repeats_warning)
    return notes
