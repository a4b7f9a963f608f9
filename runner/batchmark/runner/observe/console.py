"""The terminal: the engine's banner (the simulated engine's warning), a live progress bar, and the summary table."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from batchmark.runner.config.backend import STREAM_DISPATCH
from batchmark.runner.engines.base import EngineInfo
from batchmark.runner.engines.registry import UnknownEngine, engine_entry
from batchmark.runner.results.notes import data_note, run_notes
from batchmark.runner.results.presentation import (
    fixed,
    interval,
    milliseconds,
    money,
    repeated_in_swept_order,
    share,
    swept_order,
)
from batchmark.runner.results.report import BenchmarkResult, RunReport
from batchmark.runner.run import events
from batchmark.runner.run.profiles import Strategy


def engine_banner(report: RunReport) -> str | None:
    """What the engine warns of above its results (a simulated engine: nothing was measured); None: nothing."""
    try:
        banner = engine_entry(report.engine.kind).banner
    except UnknownEngine:  # a report read from a file may name an engine this version lacks
        return None
    return banner.format(gpu=report.engine.gpu_name or "a GPU") if banner is not None else None


def print_error(console: Console, command: str, message: str, label: str = "error", style: str = "bold red") -> None:
    """One message on the console; what the user typed (paths, names, values) is printed literally, never read
    as markup."""
    # Not wrapped: off a terminal (a pod's log) a message stays one line, whole.
    console.print(
        Text.assemble((f"batchmark {command}: {label}:", style), " ", message), highlight=False, soft_wrap=True
    )


def output_console() -> Console:
    """The console for tables on stdout. Off a terminal rich assumes 80 columns and truncates the tables' cells;
    files and pipes get room."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=140)
    return console


def print_warning(console: Console, command: str, message: str) -> None:
    print_error(console, command, message, label="warning", style="bold yellow")


def print_plain(console: Console, message: str) -> None:
    console.print(message, markup=False, highlight=False, soft_wrap=True)


class ConsoleObserver(events.RunObserver):
    """Prints to stderr, so stdout stays free for machine-readable output."""

    def __init__(self, console: Console, show_progress: bool) -> None:
        self.console = console
        self.show_progress = show_progress and console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def on_engine_loaded(self, info: EngineInfo, load_seconds: float) -> None:
        label = engine_entry(info.kind).loaded_label
        print_plain(self.console, f"{label}: loaded {info.model} in {load_seconds:.2f} s")

    def on_sweep_point(self, values: dict[str, Any], position: int, total: int) -> None:
        settings = ", ".join(f"{name}={value}" for name, value in values.items())
        print_plain(self.console, f"sweep point {position + 1}/{total}: {settings}")

    def on_benchmark_start(self, strategy: Strategy, position: int, known_total: int) -> None:
        if not self.show_progress:
            print_plain(self.console, f"benchmark {position + 1}: {strategy.label}")
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._task = self._progress.add_task(f"{position + 1}. {strategy.label}", total=None, detail="")
        self._progress.start()

    def on_progress(self, progress: events.Progress) -> None:
        if self._progress is None or self._task is None:
            return
        if progress.planned_seconds is not None:
            total, done = progress.planned_seconds, progress.elapsed
        else:
            total, done = float(progress.planned_requests or 0), float(progress.completed + progress.errored)
        rate = progress.output_tokens / progress.elapsed if progress.elapsed > 0 else 0.0
        detail = f"done {progress.completed} err {progress.errored} in flight {progress.in_flight}  {rate:,.0f} tok/s"
        self._progress.update(self._task, total=total or None, completed=done, detail=detail)

    def on_benchmark_end(self, result: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None


def summary_tables(report: RunReport) -> list[Table]:
    """Throughput, latency and the harness's cost as narrow tables, one row per benchmark, so they fit 80 columns.
    A sweep's points come in the order they were given; with repeats, one row per point over its repeats comes
    first, and the tables of every repeat after it."""
    title = f"batchmark {report.name}: {report.engine.model} on {report.engine.kind}"
    if report.engine.simulated:
        title += " (SIMULATED)"
    if not report.complete:
        title += " (INCOMPLETE)"
    swept = list(report.benchmarks[0].swept) if report.benchmarks else []
    repeated = _repeats_table(report, swept)
    each = " of each repeat" if repeated is not None else ""
    throughput = Table(title=Text(title if repeated is None else f"throughput{each}"), title_justify="left")
    # The async backend reads every token as it arrives; the batch backend sees a request only when it ends.
    streamed = report.dispatch == STREAM_DISPATCH
    timed_by = "TTFT, TPOT and ITL read on the stream" if streamed else "TTFT and TPOT from the engine's timings"
    latency = Table(title=f"latency{each} ({timed_by})", title_justify="left")
    harness = Table(
        title=f"engine steps and the harness's own cost{each} (overhead: the time per batch the engine waited for it)",
        title_justify="left",
    )
    columns: list[tuple[Table, tuple[str, ...], tuple[str, ...]]] = [
        (
            throughput,
            ("benchmark", "stop", "ok/err/incompl", "req/s", "out tok/s", "total tok/s", "batch", "util %"),
            ("benchmark", "stop"),
        ),
        (
            latency,
            ("benchmark", "lat p50, s", "lat p99, s", "queue p50, s", "TTFT p50, s", "TPOT p50, ms")
            + (("ITL p50, ms", "ITL p99, ms") if streamed else ("batch, s",)),
            ("benchmark",),
        ),
        (
            harness,
            (
                "benchmark",
                "steps",
                "steps/1k req",
                "overhead p50, ms",
                "overhead mean, ms",
                "overhead p99, ms",
                "harness CPU ms/req",
            ),
            ("benchmark",),
        ),
    ]
    for table, names, left in columns:
        for name in _identity_columns(report, swept):
            table.add_column(name, justify="right")
        for name in names:
            table.add_column(name, justify="left" if name in left else "right")
    tables = [throughput, latency, harness]
    budget = _budget_table(report, swept)
    if budget is not None:
        tables.append(budget)
    replicas = _replicas_table(report, swept)
    if replicas is not None:
        tables.append(replicas)
    for index in swept_order(report):
        result = report.benchmarks[index]
        dist = result.distributions
        counts = result.requests
        values = _identity(report, result, swept)
        throughput.add_row(
            *values,
            Text(result.strategy),
            Text(result.stop_reason),
            f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
            fixed(result.throughput.requests_per_second, 2),
            fixed(result.throughput.output_tokens_per_second, 1),
            fixed(result.throughput.total_tokens_per_second, 1),
            fixed(dist.batch_size.mean, 1),
            fixed(result.engine_utilization * 100, 1),
        )
        latency.add_row(
            *values,
            Text(result.strategy),
            fixed(dist.request_latency.median, 3),
            fixed(dist.request_latency.p99, 3),
            fixed(dist.queue_wait.median, 3),
            fixed(dist.time_to_first_token.median, 3),
            milliseconds(dist.time_per_output_token.median, 1),
            *(
                (milliseconds(dist.inter_token_latency.median, 1), milliseconds(dist.inter_token_latency.p99, 1))
                if streamed
                else (fixed(dist.batch_duration.median, 3),)
            ),
        )
        harness.add_row(
            *values,
            Text(result.strategy),
            f"{result.engine_steps:,}",
            fixed(result.engine_steps_per_1000_requests, 0),
            milliseconds(dist.dispatch_overhead.median),
            milliseconds(dist.dispatch_overhead.mean),
            milliseconds(dist.dispatch_overhead.p99),
            milliseconds(result.harness_cpu_per_request),
        )
    if repeated is None:
        return tables
    repeated.title = Text(f"{title}\n{repeated.title}")
    return [repeated, *tables]


def _identity_columns(report: RunReport, swept: list[str]) -> list[str]:
    """The columns naming a benchmark's point: its swept values, and its repeat when the run repeated."""
    return [*(name.removeprefix("vllm_config.") for name in swept), *(("repeat",) if report.repeats > 1 else ())]


def _identity(report: RunReport, result: BenchmarkResult, swept: list[str]) -> list[Text]:
    values = [Text(str(result.swept.get(name, "-"))) for name in swept]
    if report.repeats > 1:
        values.append(Text(f"{result.repeat + 1}/{report.repeats}"))
    return values


def _repeats_table(report: RunReport, swept: list[str]) -> Table | None:
    """Each benchmark over its repeats: mean [95% CI] and the spread, only when the run repeated them."""
    if not report.repeated:
        return None
    table = Table(
        title=f"over {report.repeats} repeats: mean [95% confidence interval, t on log values]; spread = std / mean",
        title_justify="left",
    )
    latency_names = list(report.repeated[0].latency)
    with_goodput = any(entry.goodput_output_tokens_per_second is not None for entry in report.repeated)
    with_cost = any(entry.cost_per_million_output_tokens is not None for entry in report.repeated)
    columns = [
        *(name.removeprefix("vllm_config.") for name in swept),
        "benchmark",
        "n",
        "out tok/s",
        "spread",
        "req/s",
        "total tok/s",
        *(["good out tok/s"] if with_goodput else []),
        *(["per M out tok"] if with_cost else []),
        *(f"{name}, s" for name in latency_names),
        "budget",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column in ("benchmark", "budget") else "right")
    for _, entry in repeated_in_swept_order(report):
        figure = entry.output_tokens_per_second
        budget = {"met": "[green]met[/]", "missed": "[red]missed[/]", None: "-"}.get(
            entry.slo, f"[yellow]{entry.slo_met_repeats} of {len(entry.benchmarks)}[/]"
        )
        table.add_row(
            *(Text(str(entry.swept.get(name, "-"))) for name in swept),
            Text(entry.strategy),
            str(figure.count),
            interval(figure, 1),
            share(figure.relative_spread),
            interval(entry.requests_per_second, 2),
            interval(entry.total_tokens_per_second, 1),
            *([interval(entry.goodput_output_tokens_per_second, 1)] if with_goodput else []),
            *([interval(entry.cost_per_million_output_tokens, 4)] if with_cost else []),
            *(interval(entry.latency.get(name), 3) for name in latency_names),
            budget,
        )
    return table


def _budget_table(report: RunReport, swept: list[str]) -> Table | None:
    """Pass/fail against the budget, goodput and cost: only when a budget or a price was given."""
    with_slo = any(result.slo is not None for result in report.benchmarks)
    with_cost = any(result.cost is not None for result in report.benchmarks)
    if not with_slo and not with_cost:
        return None
    title = "latency budget and cost" if with_slo and with_cost else "latency budget" if with_slo else "cost"
    if report.repeated:
        title += " of each repeat"
    table = Table(title=title, title_justify="left")
    columns = [*_identity_columns(report, swept), "benchmark"]
    if with_slo:
        columns += ["budget", "missed", "good req/s", "good out tok/s"]
    if with_cost:
        columns += ["GPUs", "per M out tok", "per M total tok"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("benchmark", "budget", "missed") else "right")
    for index in swept_order(report):
        result = report.benchmarks[index]
        row: list[Text | str] = [*_identity(report, result, swept), Text(result.strategy)]
        if with_slo:
            slo = result.slo
            if slo is None:
                row += ["-", "", "-", "-"]
            else:
                missed = ", ".join(target.name for target in slo.targets if not target.met)
                row += [
                    "[green]met[/]" if slo.met else "[red]missed[/]",
                    missed,
                    fixed(slo.goodput.requests_per_second, 2),
                    fixed(slo.goodput.output_tokens_per_second, 1),
                ]
        if with_cost:
            cost = result.cost
            row += (
                ["-", "-", "-"]
                if cost is None
                else [str(cost.gpus), money(cost.per_million_output_tokens), money(cost.per_million_total_tokens)]
            )
        table.add_row(*row)
    return table


def _replicas_table(report: RunReport, swept: list[str]) -> Table | None:
    """Each engine replica's own figures, then their aggregate's spread: only when a benchmark ran several."""
    if not any(result.replicas for result in report.benchmarks):
        return None
    title = "engine replicas: each one's figures over the benchmark's window; straggler = fastest / slowest"
    table = Table(title=title, title_justify="left")
    columns = [
        *_identity_columns(report, swept),
        "benchmark",
        "replica",
        "devices",
        "ok/err/incompl",
        "req/s",
        "out tok/s",
        "batch",
        "util %",
        "lat p99, s",
        "straggler",
        "scaling",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column in ("benchmark", "devices") else "right")
    for index in swept_order(report):
        result = report.benchmarks[index]
        if not result.replicas or result.replica_summary is None:
            continue
        identity = [*_identity(report, result, swept), Text(result.strategy)]
        for replica in result.replicas:
            counts = replica.requests
            table.add_row(
                *identity,
                str(replica.replica),
                Text(replica.devices),
                f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
                fixed(replica.throughput.requests_per_second, 2),
                fixed(replica.throughput.output_tokens_per_second, 1),
                fixed(replica.mean_batch_size, 1),
                fixed(replica.engine_utilization * 100, 1),
                fixed(replica.request_latency.p99, 3),
                "",
                "",
            )
        summary = result.replica_summary
        counts = result.requests
        table.add_row(
            *identity,
            f"all {summary.count}",
            "",
            f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
            fixed(result.throughput.requests_per_second, 2),
            fixed(result.throughput.output_tokens_per_second, 1),
            fixed(result.distributions.batch_size.mean, 1),
            fixed(result.engine_utilization * 100, 1),
            fixed(result.distributions.request_latency.p99, 3),
            fixed(summary.straggler_ratio, 2),
            share(summary.scaling_efficiency),
            end_section=True,
        )
    return table


def print_summary(console: Console, report: RunReport) -> None:
    banner = engine_banner(report)
    if banner is not None:
        console.print(Panel(Text(banner), style="bold yellow"))
    described = data_note(report)
    if described is not None:
        print_plain(console, described)
    for table in summary_tables(report):
        console.print(table)
    for note in run_notes(report):
        print_plain(console, note)
    if report.stop_reason is not None:
        print_plain(console, f"INCOMPLETE: {report.stop_reason}")
