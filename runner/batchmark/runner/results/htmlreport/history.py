"""A results store's runs as one self-contained HTML page: output throughput over time, one chart per model and
hardware, one series per workload (fingerprint), with each run's 95% interval where it had repeats; and the runs
as a table."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from batchmark.runner import __version__
from batchmark.runner.results.htmlreport.charts import Chart, Series, colour, line_chart
from batchmark.runner.results.htmlreport.render import environment

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class HistoryPoint:
    """One stored run, as the page shows it."""

    run_id: str
    started: datetime.datetime
    name: str
    model: str
    hardware: str
    engine: str
    simulated: bool
    workload: str  # the fingerprint's key
    output_tokens_per_second: float | None
    low: float | None
    high: float | None
    requests_per_second: float | None
    complete: bool


def render_history(points: Sequence[HistoryPoint], title: str) -> str:
    ordered = sorted(points, key=lambda point: point.started)
    return (
        environment()
        .get_template("history.html.j2")
        .render(
            title=title,
            runs=ordered,
            charts=history_charts(ordered),
            simulated=any(point.simulated for point in ordered),
            version=__version__,
        )
    )


def history_charts(points: Sequence[HistoryPoint]) -> list[Chart]:
    """Per model and hardware, output tokens/s against days since that group's first run; a series per workload."""
    groups: dict[tuple[str, str], list[HistoryPoint]] = {}
    for point in points:
        if point.output_tokens_per_second is not None:
            groups.setdefault((point.model, point.hardware), []).append(point)
    charts = []
    for index, ((model, hardware), members) in enumerate(sorted(groups.items())):
        first = min(point.started for point in members)
        workloads: dict[str, list[HistoryPoint]] = {}
        for point in members:
            workloads.setdefault(point.workload, []).append(point)
        series = []
        for number, (workload, runs) in enumerate(workloads.items()):
            days = [(point.started - first).total_seconds() / SECONDS_PER_DAY for point in runs]
            names = sorted({point.name for point in runs})
            series.append(
                Series(
                    name=f"workload {workload} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})",
                    points=[
                        (day, point.output_tokens_per_second or 0.0) for day, point in zip(days, runs, strict=True)
                    ],
                    colour=colour(number),
                    errors=[
                        (day, point.low, point.high)
                        for day, point in zip(days, runs, strict=True)
                        if point.low is not None and point.high is not None
                    ],
                )
            )
        charts.append(
            line_chart(
                f"history-{index}",
                f"{model} on {hardware}: output tokens/s",
                f"days since {first:%Y-%m-%d %H:%M} UTC",
                "output tokens/s",
                series,
            )
        )
    return charts
