"""The page's tables: the summary (throughput; latency with the harness's cost) and the sweep.

Rows come in the sweep's order, not the order the benchmarks ran in. With repeats, a point is one row, its
figures the mean and the 95% interval over its repeats ([low, high]), and each repeat is a row folded beneath it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from batchmark.runner.config.slo import parse_slo_name
from batchmark.runner.results.budget import describe_point
from batchmark.runner.results.presentation import (
    fixed,
    interval,
    milliseconds,
    money,
    repeated_in_swept_order,
    swept_order,
)
from batchmark.runner.results.report import BenchmarkResult, Estimate, RepeatedBenchmark, RunReport

Cells = dict[str, str]


@dataclass(frozen=True)
class TableRow:
    """One row: a benchmark; or, with repeats, a point over its repeats (``kind`` "point") and each of its
    repeats folded beneath it ("repeat"), tied by ``group``."""

    cells: Cells
    kind: str = ""
    group: str = ""
    recommended: bool = False


def columns(rows: Sequence[TableRow]) -> list[str]:
    """Every column of the rows, in the order they first appear: runs compared side by side may differ in their
    swept fields or in having repeats."""
    return list(dict.fromkeys(column for row in rows for column in row.cells))


def folded(
    report: RunReport,
    run_label: str,
    point_cells: Callable[[RepeatedBenchmark], Cells],
    benchmark_cells: Callable[[BenchmarkResult], Cells],
    recommended: int | None = None,
) -> list[TableRow]:
    """A report's rows in the sweep's order: one per benchmark (``recommended``: the index of the one to mark);
    with repeats, one per point, the recommended point marked, with its repeats beneath it."""
    if not report.repeated:
        return [
            TableRow(benchmark_cells(report.benchmarks[index]), recommended=index == recommended)
            for index in swept_order(report)
        ]
    chosen = report.recommendation.repeated if report.recommendation is not None else None
    rows = []
    for position, entry in repeated_in_swept_order(report):
        group = f"{run_label}/{position}"
        rows.append(TableRow(point_cells(entry), "point", group, position == chosen))
        repeats = sorted(entry.benchmarks, key=lambda index: report.benchmarks[index].repeat)
        rows.extend(TableRow(benchmark_cells(report.benchmarks[index]), "repeat", group) for index in repeats)
    return rows


def summary_rows(reports: Sequence[tuple[str, RunReport]]) -> tuple[list[TableRow], list[TableRow]]:
    """The summary in two tables, so that each fits a 1,400 px window: throughput; latency with the harness's
    cost."""
    throughput: list[TableRow] = []
    latency: list[TableRow] = []
    for run_label, report in reports:
        throughput += folded(
            report,
            run_label,
            partial(_throughput_point, run_label),
            partial(_throughput_benchmark, run_label, report),
        )
        latency += folded(
            report, run_label, partial(_latency_point, run_label), partial(_latency_benchmark, run_label, report)
        )
    return throughput, latency


def _benchmark_identity(run_label: str, report: RunReport, benchmark: BenchmarkResult) -> Cells:
    cells = {"run": run_label, "benchmark": describe_point(benchmark)}
    if report.repeats > 1:
        cells["n"] = f"{benchmark.repeat + 1}/{report.repeats}"
    return cells


def _point_identity(run_label: str, entry: RepeatedBenchmark) -> Cells:
    values = ", ".join(f"{name}={value}" for name, value in entry.swept.items())
    name = f"{entry.strategy} ({values})" if values else entry.strategy
    return {"run": run_label, "benchmark": name, "n": str(entry.output_tokens_per_second.count)}


def _throughput_benchmark(run_label: str, report: RunReport, benchmark: BenchmarkResult) -> Cells:
    counts = benchmark.requests
    return {
        **_benchmark_identity(run_label, report, benchmark),
        "stop": benchmark.stop_reason,
        "requests ok/err/incompl": f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
        "req/s": fixed(benchmark.throughput.requests_per_second, 2),
        "out tok/s": fixed(benchmark.throughput.output_tokens_per_second, 1),
        "total tok/s": fixed(benchmark.throughput.total_tokens_per_second, 1),
        "batch": fixed(benchmark.distributions.batch_size.mean, 1),
        "util %": fixed(benchmark.engine_utilization * 100, 1),
    }


def _throughput_point(run_label: str, entry: RepeatedBenchmark) -> Cells:
    return {
        **_point_identity(run_label, entry),
        "stop": "",
        "requests ok/err/incompl": "",
        "req/s": interval(entry.requests_per_second, 2),
        "out tok/s": interval(entry.output_tokens_per_second, 1),
        "total tok/s": interval(entry.total_tokens_per_second, 1),
        "batch": "",
        "util %": "",
    }


def _latency_benchmark(run_label: str, report: RunReport, benchmark: BenchmarkResult) -> Cells:
    dist = benchmark.distributions
    return {
        **_benchmark_identity(run_label, report, benchmark),
        "lat p50, s": fixed(dist.request_latency.median, 3),
        "lat p99, s": fixed(dist.request_latency.p99, 3),
        "queue p50, s": fixed(dist.queue_wait.median, 3),
        "TTFT p50, s": fixed(dist.time_to_first_token.median, 3),
        "TPOT p50, ms": milliseconds(dist.time_per_output_token.median, 1),
        "ITL p50, ms": milliseconds(dist.inter_token_latency.median, 1),
        "ITL p99, ms": milliseconds(dist.inter_token_latency.p99, 1),
        "overhead p50, ms": milliseconds(dist.dispatch_overhead.median),
        "overhead p99, ms": milliseconds(dist.dispatch_overhead.p99),
        "steps/1k req": fixed(benchmark.engine_steps_per_1000_requests, 0),
        "CPU ms/req": milliseconds(benchmark.harness_cpu_per_request),
    }


def _latency_point(run_label: str, entry: RepeatedBenchmark) -> Cells:
    """Over repeats, the run keeps the latency statistics its budget names (without one, request latency's p50
    and p99); the others are blank."""
    return {
        **_point_identity(run_label, entry),
        "lat p50, s": _latency(entry, "request_latency", "median", 3),
        "lat p99, s": _latency(entry, "request_latency", "p99", 3),
        "queue p50, s": _latency(entry, "queue_wait", "median", 3),
        "TTFT p50, s": _latency(entry, "time_to_first_token", "median", 3),
        "TPOT p50, ms": _latency(entry, "time_per_output_token", "median", 1, 1000),
        "ITL p50, ms": "",
        "ITL p99, ms": "",
        "overhead p50, ms": "",
        "overhead p99, ms": "",
        "steps/1k req": "",
        "CPU ms/req": "",
    }


def _repeated_latency(entry: RepeatedBenchmark, distribution: str, statistic: str) -> Estimate | None:
    for name, figure in entry.latency.items():
        if parse_slo_name(name) == (distribution, statistic):
            return figure
    return None


def _latency(entry: RepeatedBenchmark, distribution: str, statistic: str, places: int, scale: float = 1.0) -> str:
    figure = _repeated_latency(entry, distribution, statistic)
    return "" if figure is None else interval(figure, places, scale)


def sweep_rows(reports: Sequence[tuple[str, RunReport]]) -> list[TableRow]:
    """Each sweep's points: their swept values, throughput, latency, budget, goodput and cost."""
    rows: list[TableRow] = []
    for run_label, report in reports:
        if report.sweep is None:
            continue
        run = {"run": run_label} if len(reports) > 1 else {}
        chosen = report.recommendation.benchmark if report.recommendation is not None else None
        rows += [
            TableRow(
                {**row.cells, "recommended": "yes" if row.recommended else ""}, row.kind, row.group, row.recommended
            )
            for row in folded(
                report, run_label, partial(_sweep_point, run), partial(_sweep_benchmark, run, report), chosen
            )
        ]
    return rows


def _sweep_benchmark(run: Cells, report: RunReport, benchmark: BenchmarkResult) -> Cells:
    latency = benchmark.distributions.request_latency
    cells = {**run, **{name: str(value) for name, value in benchmark.swept.items()}, "benchmark": benchmark.strategy}
    if report.repeats > 1:
        cells["n"] = f"{benchmark.repeat + 1}/{report.repeats}"
    slo, cost = benchmark.slo, benchmark.cost
    return {
        **cells,
        "out tok/s": fixed(benchmark.throughput.output_tokens_per_second, 1),
        "lat p50, s": fixed(latency.median, 3),
        "lat p99, s": fixed(latency.p99, 3),
        "budget": "-" if slo is None else ("met" if slo.met else "missed"),
        "goodput out tok/s": "-" if slo is None else fixed(slo.goodput.output_tokens_per_second, 1),
        "cost / M out tok": money(cost.per_million_output_tokens if cost else None),
        "cost / M total tok": money(cost.per_million_total_tokens if cost else None),
    }


def _sweep_point(run: Cells, entry: RepeatedBenchmark) -> Cells:
    budget: str = "-" if entry.slo is None else entry.slo
    if entry.slo == "some":
        budget = f"{entry.slo_met_repeats} of {len(entry.benchmarks)}"
    return {
        **run,
        **{name: str(value) for name, value in entry.swept.items()},
        "benchmark": entry.strategy,
        "n": str(entry.output_tokens_per_second.count),
        "out tok/s": interval(entry.output_tokens_per_second, 1),
        "lat p50, s": _latency(entry, "request_latency", "median", 3),
        "lat p99, s": _latency(entry, "request_latency", "p99", 3),
        "budget": budget,
        "goodput out tok/s": interval(entry.goodput_output_tokens_per_second, 1),
        "cost / M out tok": interval(entry.cost_per_million_output_tokens, 4),
        "cost / M total tok": "",
    }
