"""``batchmark history``: the runs kept in a results store, filtered, as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table
from rich.text import Text

from batchmark.runner.config.arguments import HISTORY_FORMATS
from batchmark.runner.config.load import UsageError
from batchmark.runner.config.output_paths import output_problem
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.observe.console import output_console, print_error, print_plain, print_warning
from batchmark.runner.results.htmlreport.history import HistoryPoint, render_history
from batchmark.runner.results.outputs import write_atomically
from batchmark.runner.store.entries import StoredRun, utc
from batchmark.runner.store.results_store import StoreError, open_store

# The columns of --format csv (the fingerprint's whole workload is in --format json).
CSV_COLUMNS = (
    "created_at",
    "run_id",
    "name",
    "model",
    "engine",
    "simulated",
    "engine_version",
    "batchmark_version",
    "gpu_name",
    "gpus",
    "complete",
    "benchmarks",
    "repeats",
    "strategy",
    "output_tokens_per_second",
    "output_tokens_per_second_low",
    "output_tokens_per_second_high",
    "requests_per_second",
    "fingerprint",
    "folder",
)
# Glob filters: option name, and what it matches in an entry.
_GLOBS: dict[str, Callable[[StoredRun], str | None]] = {
    "model": lambda run: run.model,
    "gpu": lambda run: run.gpu_name,
    "engine_version": lambda run: run.engine_version,
    "name": lambda run: run.name,
    "fingerprint": lambda run: run.fingerprint.key,
}


@dataclass(frozen=True)
class Selection:
    """Which stored runs the filters pick (every one where none is given)."""

    patterns: dict[str, str]  # option (as in _GLOBS) -> shell-style pattern
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    last: int | None = None

    @property
    def options(self) -> list[str]:
        """The filters given, as their options."""
        given = [*self.patterns, *(name for name in ("since", "until", "last") if getattr(self, name) is not None)]
        return ["--" + name.replace("_", "-") for name in given]

    def picked(self, runs: list[StoredRun]) -> list[StoredRun]:
        """The matching runs, in the index's order (oldest first)."""
        chosen = [
            run
            for run in runs
            if all(_matches(run, name, pattern) for name, pattern in self.patterns.items())
            and (self.since is None or run.started >= self.since)
            and (self.until is None or run.started < self.until)
        ]
        return chosen[-self.last :] if self.last is not None else chosen


def selection(args: argparse.Namespace) -> Selection:
    """The filters of add_selection_arguments, checked (UsageError names the option that is wrong)."""
    return Selection(
        patterns={name: pattern for name in _GLOBS if (pattern := getattr(args, name)) is not None},
        since=_moment("--since", args.since),
        until=_moment("--until", args.until),
        last=_count("--last", args.last),
    )


def history_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        # The output first: bad input is refused before --compact changes the store.
        output_format = _format(args)
        selected, unreadable = _selected(args)
    except UsageError as error:
        print_error(console, "history", str(error))
        return EXIT_USAGE
    except StoreError as error:
        print_error(console, "history", f"--store: {error}")
        return EXIT_USAGE
    for problem in unreadable:
        print_warning(console, "history", f"left out an index entry that cannot be read: {problem}")
    if output_format == "table":
        _print_table(output_console(), selected)
        return 0
    if output_format == "html":
        text = render_history([history_point(run) for run in selected], f"batchmark history: {args.store}")
    else:
        text = as_json(selected) if output_format == "json" else as_csv(selected)
    if args.output is None:
        print(text, end="")
        return 0
    try:
        write_atomically(Path(args.output), text)
    except OSError as error:
        print_error(console, "history", f"--output: {args.output}: {error.strerror or error}")
        return EXIT_USAGE
    print_plain(console, f"wrote {args.output} ({len(selected)} runs)")
    return 0


def _format(args: argparse.Namespace) -> str:
    if args.format not in HISTORY_FORMATS:
        raise UsageError(f"--format: {args.format!r} is not one of {', '.join(HISTORY_FORMATS)}")
    if args.output is None:
        return str(args.format)
    suffix = Path(args.output).suffix.lower().lstrip(".")
    if suffix not in ("json", "csv", "html"):
        raise UsageError(f"--output: {args.output}: the file name must end in .json, .csv or .html")
    problem = output_problem(Path(args.output))
    if problem is not None:
        raise UsageError(f"--output: {args.output}: {problem}")
    return suffix


def _selected(args: argparse.Namespace) -> tuple[list[StoredRun], list[str]]:
    """The matching entries, oldest first, and the index entries that could not be read."""
    try:
        store = open_store(args.store)
    except ValueError as error:
        raise UsageError(f"--store: {error}") from None
    chosen = selection(args)
    if args.compact:
        try:
            store.compact()
        except StoreError as error:
            raise UsageError(f"--compact: {error}") from None
    index = store.index()
    return chosen.picked(index.runs), index.unreadable


def _matches(run: StoredRun, name: str, pattern: str) -> bool:
    value = _GLOBS[name](run)
    return value is not None and fnmatch.fnmatchcase(value, pattern)


def _moment(option: str, text: str | None) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        return utc(text)  # the index's own rule: a time without a zone is UTC
    except ValueError:
        raise UsageError(
            f"{option}: {text!r} is not a date or time (ISO 8601, e.g. 2026-12-01 or 2026-12-01T08:00Z)"
        ) from None


def _count(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise UsageError(f"{option}: {text!r} is not a whole number of runs, 1 or more")
    return count


def history_point(run: StoredRun) -> HistoryPoint:
    return HistoryPoint(
        run_id=run.run_id,
        started=run.started,
        name=run.name,
        model=run.model,
        hardware=f"{run.gpus} x {run.gpu_name}" if run.gpu_name else "CPU",
        engine="simulated" if run.simulated else f"{run.engine} {run.engine_version or ''}".strip(),
        simulated=run.simulated,
        workload=run.fingerprint.key,
        output_tokens_per_second=run.output_tokens_per_second,
        low=run.output_tokens_per_second_low,
        high=run.output_tokens_per_second_high,
        requests_per_second=run.requests_per_second,
        complete=run.complete,
    )


# pydantic's serializer: json.dumps with an indent is Python's slow encoder (3.6 s of 10,000 runs' 4 s).
_RUNS = TypeAdapter(list[StoredRun])


def as_json(runs: list[StoredRun]) -> str:
    return _RUNS.dump_json(runs, indent=2).decode() + "\n"


def as_csv(runs: list[StoredRun]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in runs:
        row = run.model_dump(mode="json")
        row["fingerprint"] = run.fingerprint.key
        writer.writerow(["" if row[column] is None else row[column] for column in CSV_COLUMNS])
    return buffer.getvalue()


def _print_table(console: Console, runs: list[StoredRun]) -> None:
    if not runs:
        print_plain(console, "no stored runs match")
        return
    table = Table(title=f"{len(runs)} stored run{'' if len(runs) == 1 else 's'}", title_justify="left")
    table.add_column("started (UTC)", no_wrap=True)
    for column in ("name", "model", "hardware", "engine", "output tok/s", "req/s"):
        table.add_column(column, overflow="fold")
    table.add_column("fingerprint", no_wrap=True)
    table.add_column("run", no_wrap=True)
    for run in runs:
        engine = "simulated" if run.simulated else f"{run.engine} {run.engine_version or ''}".strip()
        cells = (
            run.started.strftime("%Y-%m-%d %H:%M"),
            run.name,
            run.model,
            f"{run.gpus} x {run.gpu_name}" if run.gpu_name else "CPU",
            engine,
            _throughput(run),
            "" if run.requests_per_second is None else f"{run.requests_per_second:.3g}",
            run.fingerprint.key,
            run.run_id,
        )
        # Text, not strings: a model's or a name's brackets are shown, never read as markup.
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table, highlight=False)


def _throughput(run: StoredRun) -> str:
    if run.output_tokens_per_second is None:
        return ""
    shown = f"{run.output_tokens_per_second:.4g}"
    if run.output_tokens_per_second_low is not None and run.output_tokens_per_second_high is not None:
        shown += f" [{run.output_tokens_per_second_low:.4g}, {run.output_tokens_per_second_high:.4g}]"
    if not run.complete:
        shown += " (cut short)"
    return shown
