"""A results store over a pyarrow file system: a local folder (or a volume mounted in a pod), or a bucket's prefix
on an S3-compatible object store.

Layout, for a person to browse::

    runs/MODEL/HARDWARE/DATE/TIME-RUN_ID/   results.json, report.html, config.yaml, fingerprint.json
    index/DATE-TIME-RUN_ID.json             the run's index entry (one JSON line)

A run appears whole or not at all: readers list only the index, and a run's index entry is written last, in one
piece. In a folder the run's files are written under a hidden name, renamed into place, and the entry is written
under a hidden name and renamed too; a run whose writing was cut short leaves at most a hidden folder, or a folder
without an entry. In a bucket there is no rename: the run's objects are put, then its entry, one object (a PUT is
atomic per object); an upload that fails deletes the objects it put.
"""

from __future__ import annotations

import datetime
import re
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from batchmark.runner.config.safeload import load_json
from batchmark.runner.config.store import S3Location, first_line, s3_filesystem, store_location
from batchmark.runner.results.fingerprint import Fingerprint, fingerprint
from batchmark.runner.results.htmlreport.render import render_report
from batchmark.runner.results.report import RunReport
from batchmark.runner.store.entries import StoredRun, stored_run, utc

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

RUNS = "runs"
INDEX = "index"
RESULTS_FILE = "results.json"
# Folder names stay readable and well inside every file system's limit.
_MAX_SLUG = 80
# Index entries read at once from an object store, where each is a request or two: 2,000 entries in about a second.
S3_READERS = 32


class StoreError(Exception):
    """The store could not be written or read; the message says what and why."""


@dataclass
class Index:
    """The store's runs, oldest first, and the entries that could not be read."""

    runs: list[StoredRun]
    unreadable: list[str] = field(default_factory=list)


class ResultsStore:
    """Runs kept under ``root`` of ``filesystem`` (a pyarrow path: an absolute folder, or BUCKET/PREFIX).

    ``renames``: a local file system, which renames a folder in one step; without, an object store: runs are put
    object by object and the index entry last. ``readers``: index entries read at once. ``name``: the store as the
    user named it, for messages."""

    def __init__(self, filesystem: FileSystem, root: str, name: str, *, renames: bool, readers: int = 1) -> None:
        self.filesystem = filesystem
        self.root = root.rstrip("/")
        self.name = name
        self.renames = renames
        self.readers = readers

    def put(self, report: RunReport) -> StoredRun:
        """Store the run whole, then its index entry; StoreError when it cannot (nothing half-written is left
        where a reader looks)."""
        started = utc(report.created_at)
        printed = fingerprint(report)
        entry_name = f"{started:%Y%m%dT%H%M%SZ}-{_slug(report.run_id)}.json"
        relative = "/".join(
            (
                RUNS,
                _slug(report.engine.model),
                _hardware(report, printed),
                f"{started:%Y-%m-%d}",
                f"{started:%H%M%SZ}-{_slug(report.run_id)}",
            )
        )
        try:
            if self._exists(self._path(INDEX, entry_name)):
                raise StoreError(f"run {report.run_id} is already in the store {self.name}")
            files: dict[str, Callable[[], str]] = {
                RESULTS_FILE: lambda: report.model_dump_json(indent=2),
                "report.html": lambda: render_report(report),
                "config.yaml": lambda: yaml.safe_dump(report.config, sort_keys=False),
                "fingerprint.json": lambda: printed.model_dump_json(indent=2),
            }
            if self.renames:
                self._put_folder(relative, files)
            else:
                self._put_objects(relative, files)
            stored_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
            entry = stored_run(report, relative, stored_at, printed)
            try:
                self._write_entry(entry_name, entry.model_dump_json() + "\n")
            except BaseException:
                self._remove_run(relative)
                raise
        except OSError as error:
            raise StoreError(f"cannot store the run in {self.name}: {_reason(error)}") from None
        return entry

    def index(self) -> Index:
        """Every stored run's entry, oldest first: the index listed in one request, the entries read at once."""
        from pyarrow.fs import FileSelector, FileType  # noqa: PLC0415 - imported by a store's first use only

        try:
            if self.renames and self.filesystem.get_file_info(self.root).type != FileType.Directory:
                raise StoreError(f"{self.name} is not a results store: no such folder")
            if not self.renames and self.filesystem.get_file_info(self._bucket()).type == FileType.NotFound:
                raise StoreError(f"{self.name}: no such bucket {self._bucket()!r}")
            infos = self.filesystem.get_file_info(FileSelector(self._path(INDEX), allow_not_found=True))
        except OSError as error:
            raise StoreError(f"cannot read the store's index in {self.name}: {_reason(error)}") from None
        paths = sorted(
            info.path
            for info in infos
            if info.type == FileType.File and info.base_name.endswith(".json") and not info.base_name.startswith(".")
        )
        found = Index(runs=[])
        for path, read in zip(paths, self._read_all(paths), strict=True):
            name = path.rpartition("/")[2]
            if isinstance(read, BaseException):
                found.unreadable.append(f"{name}: {_reason(read)}")
                continue
            try:
                found.runs.append(StoredRun.model_validate_json(read))
            except (ValidationError, ValueError) as error:
                found.unreadable.append(f"{name}: {first_line(error)}")
        # Runs started in the same second are in the order they were stored.
        found.runs.sort(key=lambda run: (run.started, utc(run.stored_at)))
        return found

    def report(self, run: StoredRun) -> RunReport:
        """The stored run's whole results."""
        path = self._path(run.folder, RESULTS_FILE)
        try:
            return RunReport.model_validate(load_json(self._read(path).decode("utf-8")))
        except (OSError, ValueError) as error:
            raise StoreError(f"cannot read run {run.run_id} ({self._shown(path)}): {_reason(error)}") from None

    def _put_folder(self, relative: str, files: dict[str, Callable[[], str]]) -> None:
        """The run's files in a hidden folder beside its place, renamed into place."""
        final = self._path(relative)
        parent, _, name = final.rpartition("/")
        partial = f"{parent}/.{name}.{secrets.token_hex(4)}.partial"
        self.filesystem.create_dir(partial, recursive=True)
        try:
            for file_name, content in files.items():
                self._write(f"{partial}/{file_name}", content())
            self.filesystem.move(partial, final)
        except BaseException:
            with suppress(OSError):
                self.filesystem.delete_dir(partial)
            self._remove_empty_parents(parent)
            raise

    def _put_objects(self, relative: str, files: dict[str, Callable[[], str]]) -> None:
        """The run's objects one by one; those put are deleted when one fails."""
        written = False
        try:
            for file_name, content in files.items():
                self._write(self._path(relative, file_name), content())
                written = True
        except BaseException:
            if written:
                self._remove_run(relative)
            raise

    def _write_entry(self, entry_name: str, text: str) -> None:
        folder = self._path(INDEX)
        if not self.renames:
            self._write(f"{folder}/{entry_name}", text)
            return
        self.filesystem.create_dir(folder, recursive=True)
        partial = f"{folder}/.{entry_name}.{secrets.token_hex(4)}.partial"
        try:
            self._write(partial, text)
            self.filesystem.move(partial, f"{folder}/{entry_name}")
        except BaseException:
            with suppress(OSError):
                self.filesystem.delete_file(partial)
            raise

    def _remove_run(self, relative: str) -> None:
        """A run that could not be stored: its folder (its objects) deleted, best effort: a store that fails that too
        is not tried again. The folder holds this run's files alone: no other writer's can be caught in it.

        In a bucket pyarrow then puts an empty marker object for the run's date folder (it keeps a folder it
        emptied), which no reader lists."""
        folder = self._path(relative)
        with suppress(OSError):
            self.filesystem.delete_dir(folder)
        if self.renames:
            self._remove_empty_parents(folder.rpartition("/")[0])

    def _remove_empty_parents(self, folder: str) -> None:
        """The model, hardware and date folders made for a run that could not be stored, where nothing else is:
        each removed only while empty (rmdir), so that a run another writer is storing beside it is never caught.
        Local folders only (``renames``)."""
        while folder.startswith(self.root + "/"):
            try:
                Path(folder).rmdir()
            except OSError:
                return
            folder = folder.rpartition("/")[0]

    def _read_all(self, paths: list[str]) -> Iterator[bytes | BaseException]:
        """Each path's bytes (or why it could not be read), in order; ``readers`` at a time."""
        if self.readers <= 1 or len(paths) <= 1:
            yield from map(self._read_or_error, paths)
            return
        with ThreadPoolExecutor(max_workers=min(self.readers, len(paths)), thread_name_prefix="store-index") as pool:
            yield from pool.map(self._read_or_error, paths)

    def _read_or_error(self, path: str) -> bytes | BaseException:
        try:
            return self._read(path)
        except OSError as error:
            return error

    def _read(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(path, compression=None) as stream:
            data: bytes = stream.readall()
            return data

    def _write(self, path: str, text: str) -> None:
        with self.filesystem.open_output_stream(path, compression=None) as stream:
            stream.write(text.encode("utf-8"))

    def _exists(self, path: str) -> bool:
        from pyarrow.fs import FileType  # noqa: PLC0415

        return bool(self.filesystem.get_file_info(path).type != FileType.NotFound)

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def _bucket(self) -> str:
        return self.root.partition("/")[0]

    def _shown(self, path: str) -> str:
        """A path in the store as the user would name it."""
        return f"{self.name.rstrip('/')}/{path.removeprefix(self.root + '/')}"


def open_store(location: str) -> ResultsStore:
    """The store ``location`` names (a folder, a file:// URL, s3://BUCKET/PREFIX); ValueError when it names none,
    StoreError when an S3 store's endpoint (AWS_ENDPOINT_URL) is not one."""
    where = store_location(location)
    if isinstance(where, S3Location):
        try:
            filesystem = s3_filesystem()
        except ValueError as error:
            raise StoreError(str(error)) from None
        except OSError as error:  # pyarrow could not set up its S3 client
            raise StoreError(f"cannot reach {where}: {_reason(error)}") from None
        return ResultsStore(filesystem, where.root, str(where), renames=False, readers=S3_READERS)
    from pyarrow.fs import LocalFileSystem  # noqa: PLC0415 - 0.15 s of imports, for a store's commands only

    return ResultsStore(LocalFileSystem(), Path(where).absolute().as_posix(), str(where), renames=True)


def _reason(error: BaseException) -> str:
    """An error's first line, without the errno pyarrow puts before a local file system's."""
    return re.sub(r"^\[Errno \d+\] ", "", first_line(error))


def _slug(text: str) -> str:
    """A folder name that keeps ``text`` readable: a model id's slash as "--", as Hugging Face's cache does."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "--")).strip("._-")
    return slug[:_MAX_SLUG] or "unnamed"


def _hardware(report: RunReport, printed: Fingerprint) -> str:
    gpus = printed.workload["hardware"]["gpus"]
    return _slug(f"{gpus}x-{report.engine.gpu_name}") if report.engine.gpu_name else "cpu"
