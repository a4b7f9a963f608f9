"""A results store over a pyarrow file system: a local folder (or a volume mounted in a pod), or a bucket's prefix
on an S3-compatible object store.

Layout, for a person to browse::

    runs/MODEL/HARDWARE/DATE/TIME-RUN_ID/   results.json, report.html, config.yaml, fingerprint.json
    index/DATE-TIME-RUN_ID.json             the run's index entry (one JSON line), "loose"
    index/compacted/FIRST-LAST-RANDOM.jsonl.gz  many runs' entries, gzipped JSON lines (FIRST, LAST: their starts)

A run appears whole or not at all: readers list only the index, and a run's index entry is written last, in one
piece. In a folder the run's files are written under a hidden name, renamed into place, and the entry is written
under a hidden name and renamed too; a run whose writing was cut short leaves at most a hidden folder, or a folder
without an entry. In a bucket there is no rename: the run's objects are put, then its entry, one object (a PUT is
atomic per object); an upload that fails deletes the objects it put.

Compaction keeps reading the index a request or two however many runs there are (in a bucket each loose entry is
a GET): it writes one compacted object holding the loose entries (and, now and then, the compacted objects), and
only then deletes what it gathered. Every entry is in the index at every moment, at times twice (a compaction cut
short, or two at once): readers keep one entry per run id. Gzipped JSON lines rather than Parquet: an entry's
fingerprint is free-form nested settings that no one table schema fits, each line is an entry as a loose one is
written, read by the same model, and `zcat` shows them; entries repeat each other's keys and settings, so gzip
makes them a small fraction of their size to fetch (a run's entry is about 2 kB).
"""

from __future__ import annotations

import datetime
import gzip
import re
import secrets
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import TypeAdapter, ValidationError

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
COMPACTED = "compacted"
COMPACTED_SUFFIX = ".jsonl.gz"
RESULTS_FILE = "results.json"
# A put that finds this many loose entries gathers them into a compacted object: a bucket's reader then makes one
# request for them instead of one each, and a put's extra cost stays bounded (this many reads, one write, this
# many deletes, once in this many puts).
COMPACT_AFTER = 100
# A compaction that finds this many compacted objects merges them all into its own, so that readers' requests
# stay few however many runs the store keeps (reading them all, once in about this many compactions).
MERGE_AFTER = 16
# Listings of the index one read makes at most: an entry that a compaction deletes while a reader reads it is in
# an object the next listing shows.
_INDEX_LISTINGS = 3
# The start time that begins an entry's name and both ends of a compacted object's.
_TIME = r"\d{8}T\d{6}Z"
_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
_COMPACTED_NAME = re.compile(rf"({_TIME})-({_TIME})-[0-9a-f]+{re.escape(COMPACTED_SUFFIX)}")
# Folder names stay readable and well inside every file system's limit.
_MAX_SLUG = 80
# Index entries read at once from an object store, where each is a request or two: 2,000 entries in about a second.
S3_READERS = 32
# A compacted object's entries validated at once: faster than line by line.
_ENTRIES = TypeAdapter(list[StoredRun])


class StoreError(Exception):
    """The store could not be written or read; the message says what and why."""


@dataclass(frozen=True)
class _IndexObjects:
    """The index's objects as one listing found them: full paths, sorted."""

    loose: list[str]
    compacted: list[str]


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
        where a reader looks). A put that finds COMPACT_AFTER loose entries then compacts them."""
        started = utc(report.created_at)
        printed = fingerprint(report)
        entry_name = f"{started:{_TIME_FORMAT}}-{_slug(report.run_id)}.json"
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
            # The entry's own name first: the first request, and the answer for a run stored again at once.
            stored = self._exists(self._path(INDEX, entry_name))
            found = self._index_objects()
            if stored or self._compacted_run(found, report.run_id, started):
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
        if len(found.loose) + 1 >= COMPACT_AFTER:
            # The run is stored; a compaction that fails (a race, an identity that may not delete) is the next
            # put's to do, and readers read the loose entries meanwhile.
            with suppress(OSError, StoreError):
                self._compact(self._index_objects(), merge_all=False)
        return entry

    def index(self) -> Index:
        """Every stored run's entry, oldest first: the index listed in one request, its objects read at once."""
        from pyarrow.fs import FileType  # noqa: PLC0415 - imported by a store's first use only

        try:
            if self.renames and self.filesystem.get_file_info(self.root).type != FileType.Directory:
                raise StoreError(f"{self.name} is not a results store: no such folder")
            if not self.renames and self.filesystem.get_file_info(self._bucket()).type == FileType.NotFound:
                raise StoreError(f"{self.name}: no such bucket {self._bucket()!r}")
        except OSError as error:
            raise StoreError(f"cannot read the store's index in {self.name}: {_reason(error)}") from None
        runs: dict[str, StoredRun] = {}
        problems: dict[str, str] = {}
        read: set[str] = set()
        failed: dict[str, BaseException] = {}
        for _ in range(_INDEX_LISTINGS):
            try:
                found = self._index_objects()
            except OSError as error:
                raise StoreError(f"cannot read the store's index in {self.name}: {_reason(error)}") from None
            listed = found.loose + found.compacted
            present = set(listed)
            # Gone since it failed: a compaction gathered it into an object this listing shows.
            failed = {path: error for path, error in failed.items() if path in present}
            pending = [path for path in listed if path not in read and path not in failed]
            if not pending:
                break
            for path, content in zip(pending, self._read_all(pending), strict=True):
                if isinstance(content, BaseException):
                    failed[path] = content
                    continue
                read.add(path)
                entries, problem = self._entries(path, content)
                for run in entries:
                    runs.setdefault(run.run_id, run)
                if problem is not None:
                    problems[path] = problem
            if not failed:
                break
        problems.update({path: _reason(error) for path, error in failed.items()})
        # Runs started in the same second are in the order they were stored.
        ordered = sorted(runs.values(), key=lambda run: (run.started, utc(run.stored_at)))
        return Index(
            runs=ordered, unreadable=[f"{self._index_name(path)}: {problems[path]}" for path in sorted(problems)]
        )

    def compact(self) -> int:
        """Gather every loose entry and compacted object into one compacted object, then delete them; the runs it
        holds (0: nothing to gather). StoreError when the store cannot be read, written or deleted from."""
        try:
            return self._compact(self._index_objects(), merge_all=True)
        except OSError as error:
            raise StoreError(f"cannot compact the index of {self.name}: {_reason(error)}") from None

    def _compact(self, found: _IndexObjects, *, merge_all: bool) -> int:
        """One compacted object of ``found``'s loose entries, and of its compacted objects where ``merge_all`` or
        there are MERGE_AFTER of them; what it gathered deleted once it is written. Compacted objects whose span
        of start times meets the loose entries' are read as well: an entry one holds already (a compaction cut
        short before its deletes) is deleted, not gathered again."""
        merged = found.compacted if merge_all or len(found.compacted) >= MERGE_AFTER else []
        loose_times = [time for time in map(_entry_time, found.loose) if time is not None]
        consulted = [
            path
            for path in found.compacted
            if path not in merged and loose_times and _spans(path, min(loose_times), max(loose_times))
        ]
        if not found.loose and len(merged) <= 1:
            return 0
        paths = [*found.loose, *merged, *consulted]
        contents = dict(zip(paths, self._read_all(paths), strict=True))
        held: set[str] = set()
        for path in consulted:
            content = contents[path]
            if not isinstance(content, BaseException):
                held.update(run.run_id for run in self._entries(path, content)[0])
        gathering: dict[str, StoredRun] = {}
        gathered: list[str] = []
        for path in [*found.loose, *merged]:
            content = contents[path]
            if isinstance(content, BaseException):
                continue  # another compaction's, or unreadable: left for readers to name
            entries, problem = self._entries(path, content)
            if problem is not None:
                continue  # left whole, so that readers keep naming what cannot be read in it
            gathered.append(path)
            for run in entries:
                if run.run_id not in held:
                    gathering.setdefault(run.run_id, run)
        if gathering:
            starts = [run.started for run in gathering.values()]
            name = f"{min(starts):{_TIME_FORMAT}}-{max(starts):{_TIME_FORMAT}}-{secrets.token_hex(4)}{COMPACTED_SUFFIX}"
            lines = "".join(run.model_dump_json() + "\n" for run in gathering.values())
            body = gzip.compress(lines.encode("utf-8"), mtime=0)
            self._write_atomically(self._path(INDEX, COMPACTED), name, body)
        self._delete_all(gathered)
        return len(gathering)

    def _compacted_run(self, found: _IndexObjects, run_id: str, started: datetime.datetime) -> bool:
        """Whether a compacted object holds ``run_id``: only those whose span of start times holds ``started``
        are read (a new run is usually later than every compacted one: none)."""
        moment = f"{started:{_TIME_FORMAT}}"
        spanning = [path for path in found.compacted if _spans(path, moment, moment)]
        for path, content in zip(spanning, self._read_all(spanning), strict=True):
            if isinstance(content, BaseException):
                continue  # merged away since listed (a compaction at the same moment): not looked for further
            if any(run.run_id == run_id for run in self._entries(path, content)[0]):
                return True
        return False

    def _index_objects(self) -> _IndexObjects:
        """The index's loose entries and compacted objects, in one listing (OSError when it cannot be listed)."""
        from pyarrow.fs import FileSelector, FileType  # noqa: PLC0415

        folder, compacted_folder = self._path(INDEX), self._path(INDEX, COMPACTED)
        infos = self.filesystem.get_file_info(FileSelector(folder, recursive=True, allow_not_found=True))
        loose: list[str] = []
        compacted: list[str] = []
        for info in infos:
            # Hidden: an entry or object being written in a folder, under the name it is renamed from.
            if info.type != FileType.File or info.base_name.startswith("."):
                continue
            parent = info.path.rpartition("/")[0]
            if parent == folder and info.base_name.endswith(".json"):
                loose.append(info.path)
            elif parent == compacted_folder and info.base_name.endswith(COMPACTED_SUFFIX):
                compacted.append(info.path)
        return _IndexObjects(loose=sorted(loose), compacted=sorted(compacted))

    def _entries(self, path: str, content: bytes) -> tuple[list[StoredRun], str | None]:
        """The runs in an index object's content, and what could not be read in it (None: all could)."""
        if not path.endswith(COMPACTED_SUFFIX):
            try:
                return [StoredRun.model_validate_json(content)], None
            except (ValidationError, ValueError) as error:
                return [], first_line(error)
        try:
            lines = [line for line in gzip.decompress(content).splitlines() if line.strip()]
        except (OSError, EOFError, zlib.error) as error:
            return [], f"not a gzipped file: {_reason(error)}"
        try:
            return _ENTRIES.validate_json(b"[" + b",".join(lines) + b"]"), None
        except (ValidationError, ValueError):
            pass  # a line that is not an entry: each line read alone, to name it and keep the others
        runs: list[StoredRun] = []
        problems: list[str] = []
        for number, line in enumerate(lines, start=1):
            try:
                runs.append(StoredRun.model_validate_json(line))
            except (ValidationError, ValueError) as error:
                problems.append(f"line {number}: {first_line(error)}")
        return runs, "; ".join(problems)

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
        self._write_atomically(self._path(INDEX), entry_name, text.encode("utf-8"))

    def _write_atomically(self, folder: str, name: str, content: bytes) -> None:
        """``content`` in one piece under ``folder/name``: in a folder written under a hidden name and renamed."""
        if not self.renames:
            self._write_bytes(f"{folder}/{name}", content)
            return
        self.filesystem.create_dir(folder, recursive=True)
        partial = f"{folder}/.{name}.{secrets.token_hex(4)}.partial"
        try:
            self._write_bytes(partial, content)
            self.filesystem.move(partial, f"{folder}/{name}")
        except BaseException:
            with suppress(OSError):
                self.filesystem.delete_file(partial)
            raise

    def _delete_all(self, paths: list[str]) -> None:
        """Each of ``paths`` deleted, ``readers`` at a time; one another compaction deleted first is no error."""

        def delete(path: str) -> None:
            with suppress(FileNotFoundError):
                self.filesystem.delete_file(path)

        with ThreadPoolExecutor(
            max_workers=max(1, min(self.readers, len(paths))), thread_name_prefix="store-gc"
        ) as pool:
            for _ in pool.map(delete, paths):
                pass

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
        self._write_bytes(path, text.encode("utf-8"))

    def _write_bytes(self, path: str, content: bytes) -> None:
        with self.filesystem.open_output_stream(path, compression=None) as stream:
            stream.write(content)

    def _exists(self, path: str) -> bool:
        from pyarrow.fs import FileType  # noqa: PLC0415

        return bool(self.filesystem.get_file_info(path).type != FileType.NotFound)

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def _bucket(self) -> str:
        return self.root.partition("/")[0]

    def _index_name(self, path: str) -> str:
        """An index object's name as warnings give it: a loose entry's file name, compacted/NAME."""
        return path.removeprefix(self._path(INDEX) + "/")

    def _shown(self, path: str) -> str:
        """A path in the store as the user would name it."""
        return f"{self.name.rstrip('/')}/{path.removeprefix(self.root + '/')}"


class IndexedOnce(ResultsStore):
    """A store that one command reads in several look-ups (runs by id, by filters, a baseline): its index is read
    at the first only, and every look-up sees the same runs (an S3 store of 10,000 runs takes about a second to
    read). Its own puts read it again."""

    _index: Index | None = None

    def index(self) -> Index:
        if self._index is None:
            self._index = super().index()
        return self._index

    def put(self, report: RunReport) -> StoredRun:
        self._index = None
        return super().put(report)


def indexed_once(store: ResultsStore) -> IndexedOnce:
    """``store`` as an IndexedOnce."""
    return IndexedOnce(store.filesystem, store.root, store.name, renames=store.renames, readers=store.readers)


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


def _entry_time(path: str) -> str | None:
    """The start time a loose entry's name begins with."""
    name = path.rpartition("/")[2]
    return name[:16] if re.match(_TIME, name) else None


def _spans(path: str, first: str, last: str) -> bool:
    """Whether a compacted object's span of start times meets first..last (one not named so: it may)."""
    named = _COMPACTED_NAME.fullmatch(path.rpartition("/")[2])
    return named is None or (named[1] <= last and first <= named[2])


def _slug(text: str) -> str:
    """A folder name that keeps ``text`` readable: a model id's slash as "--", as Hugging Face's cache does."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "--")).strip("._-")
    return slug[:_MAX_SLUG] or "unnamed"


def _hardware(report: RunReport, printed: Fingerprint) -> str:
    gpus = printed.workload["hardware"]["gpus"]
    return _slug(f"{gpus}x-{report.engine.gpu_name}") if report.engine.gpu_name else "cpu"
