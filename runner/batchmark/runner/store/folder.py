"""A results store in a folder (a local one, or a volume mounted in a pod).

Layout, for a person to browse::

    runs/MODEL/HARDWARE/DATE/TIME-RUN_ID/   results.json, report.html, config.yaml, fingerprint.json
    index/DATE-TIME-RUN_ID.json             the run's index entry (one JSON line)

A run appears whole or not at all: its folder is written under a hidden name and renamed into place, and its index
entry, which is what readers list, is written (atomically) last. A run whose writing was cut short leaves at most a
hidden folder, or a folder without an entry, which no reader sees.
"""

from __future__ import annotations

import datetime
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from batchmark.runner.results.fingerprint import fingerprint
from batchmark.runner.results.htmlreport.render import render_report
from batchmark.runner.results.outputs import load_report, write_atomically
from batchmark.runner.results.report import RunReport
from batchmark.runner.store.entries import StoredRun, stored_run

RUNS = "runs"
INDEX = "index"
RESULTS_FILE = "results.json"
# Folder names stay readable and well inside every file system's limit.
_MAX_SLUG = 80


class StoreError(Exception):
    """The store could not be written or read; the message says what and why."""


@dataclass
class Index:
    """The store's runs, oldest first, and the entries that could not be read."""

    runs: list[StoredRun]
    unreadable: list[str] = field(default_factory=list)


class FolderStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, report: RunReport) -> StoredRun:
        """Store the run whole, then its index entry; StoreError when it cannot (nothing half-written is left
        where a reader looks)."""
        started = _utc(report.created_at)
        entry_path = self.root / INDEX / f"{started:%Y%m%dT%H%M%SZ}-{_slug(report.run_id)}.json"
        if entry_path.exists():
            raise StoreError(f"run {report.run_id} is already in the store {self.root}")
        relative = Path(
            RUNS,
            _slug(report.engine.model),
            _hardware(report),
            f"{started:%Y-%m-%d}",
            f"{started:%H%M%SZ}-{_slug(report.run_id)}",
        )
        final = self.root / relative
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".partial"))
            try:
                (partial / RESULTS_FILE).write_text(report.model_dump_json(indent=2), encoding="utf-8")
                (partial / "report.html").write_text(render_report(report), encoding="utf-8")
                (partial / "config.yaml").write_text(yaml.safe_dump(report.config, sort_keys=False), encoding="utf-8")
                (partial / "fingerprint.json").write_text(fingerprint(report).model_dump_json(indent=2))
                partial.chmod(0o755)  # mkdtemp's 0700 would hide the run from the store's other readers
                partial.rename(final)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            stored_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
            entry = stored_run(report, relative.as_posix(), stored_at)
            try:
                write_atomically(entry_path, entry.model_dump_json() + "\n")
            except BaseException:
                shutil.rmtree(final, ignore_errors=True)
                _remove_empty_parents(final.parent, self.root)
                raise
        except OSError as error:
            where = error.filename or self.root
            raise StoreError(f"cannot store the run in {self.root}: {where}: {error.strerror or error}") from None
        return entry

    def index(self) -> Index:
        """Every stored run's entry, oldest first."""
        folder = self.root / INDEX
        if not self.root.is_dir():
            raise StoreError(f"{self.root} is not a results store: no such folder")
        found = Index(runs=[])
        try:
            paths = sorted(path for path in folder.glob("*.json") if not path.name.startswith("."))
        except OSError as error:
            raise StoreError(f"cannot read the store's index {folder}: {error.strerror or error}") from None
        for path in paths:
            try:
                found.runs.append(StoredRun.model_validate_json(path.read_bytes()))
            except (OSError, ValidationError, ValueError) as error:
                found.unreadable.append(f"{path.name}: {_first_line(error)}")
        # Runs started in the same second are in the order they were stored.
        found.runs.sort(key=lambda run: (_utc(run.created_at), _utc(run.stored_at)))
        return found

    def report(self, run: StoredRun) -> RunReport:
        """The stored run's whole results."""
        path = self.root / run.folder / RESULTS_FILE
        try:
            return load_report(path)
        except (OSError, ValueError) as error:
            raise StoreError(f"cannot read run {run.run_id} ({path}): {_first_line(error)}") from None


def _remove_empty_parents(folder: Path, root: Path) -> None:
    """The model, hardware and date folders made for a run that could not be stored, where nothing else is."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _utc(timestamp: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def _slug(text: str) -> str:
    """A folder name that keeps ``text`` readable: a model id's slash as "--", as Hugging Face's cache does."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "--")).strip("._-")
    return slug[:_MAX_SLUG] or "unnamed"


def _hardware(report: RunReport) -> str:
    gpus = fingerprint(report).workload["hardware"]["gpus"]
    return _slug(f"{gpus}x-{report.engine.gpu_name}") if report.engine.gpu_name else "cpu"


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]
