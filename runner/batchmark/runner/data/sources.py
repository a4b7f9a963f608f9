"""Where the user's records come from: each kind of file, saved datasets, folders and hub ids, as a stream of raw
records and how one becomes a record (a dict).

JSONL is read a line at a time with ``json`` (a line is parsed only when it is used), a JSON list one item at a
time with ``ijson`` (ShareGPT's form: a list of any size costs one item's memory), CSV with ``csv`` (quoted newlines;
every value a text), Parquet through ``pyarrow``'s batches; saved datasets, folders and hub ids through
``datasets``. A line at fault is named by its line in the file.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from batchmark.runner.config.data import DatasetDataConfig, RecordsDataConfig, ShareGptDataConfig
from batchmark.runner.contract import ENV_DATA_DIRECTORY

FILE_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet", ".txt")
SHAREGPT_EXTENSIONS = (".json", ".jsonl")
# save_to_disk writes one of these at the top of its folder.
_SAVED_MARKERS = ("dataset_dict.json", "state.json")
_PARQUET_BATCH_ROWS = 1024


class DataError(ValueError):
    """The data cannot be used; the message names the field and the file."""


class _Unreadable(ValueError):
    """A line of the file cannot be read as a record; the message names the file's line."""


class RecordStream(NamedTuple):
    """The data's records as read, and how one becomes a record (a dict): parsing waits until a record is used."""

    raw: Iterable[Any]
    decode: Callable[[Any], dict[str, Any]]
    numbers_as_text: bool = False  # CSV: every value is a text, a number of tokens included


def _as_is(record: Any) -> dict[str, Any]:
    return record  # type: ignore[no-any-return]


def _datasets() -> Any:
    """Hugging Face datasets (imported on first use: ~80 MB), printing no progress bars or warnings."""
    import datasets  # noqa: PLC0415 - heavy; only data it alone reads needs it

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    logging.getLogger("datasets").setLevel(logging.ERROR)
    return datasets


def describe(error: BaseException) -> str:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, _Unreadable):
            return str(seen)
        if isinstance(seen, UnicodeDecodeError):
            return f"not UTF-8 text (byte {seen.start} of a block: {seen.reason})"
        seen = seen.__cause__ or seen.__context__
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def data_path(given: str) -> Path:
    """The path as given; a relative one under the pod's data volume when the operator mounted one."""
    path = Path(given).expanduser()
    mounted = os.environ.get(ENV_DATA_DIRECTORY)
    return Path(mounted) / path if mounted and not path.is_absolute() else path


def open_records(config: RecordsDataConfig) -> tuple[str, RecordStream]:
    path = data_path(config.path)
    if isinstance(config, DatasetDataConfig):
        return config.path, _open_dataset(config, path)
    if not path.exists():
        raise DataError(f"path: {config.path}: no such file")
    if not path.is_file():
        raise DataError(f"path: {config.path}: not a file (a folder is read with kind=dataset)")
    suffix = path.suffix.lower()
    allowed = SHAREGPT_EXTENSIONS if isinstance(config, ShareGptDataConfig) else FILE_EXTENSIONS
    if suffix not in allowed:
        raise DataError(f"path: {config.path}: the file name must end in one of {', '.join(allowed)}")
    if path.stat().st_size == 0:
        raise DataError(f"path: {config.path}: the data set is empty (no records)")
    if suffix == ".jsonl" or (suffix == ".json" and not _is_json_list(path)):
        return config.path, RecordStream(_json_lines(path), _decode_json_line)
    if suffix == ".json":
        return config.path, RecordStream(_json_list_items(path), _as_is)
    if suffix == ".csv":
        return config.path, RecordStream(_csv_records(path), _as_is, numbers_as_text=True)
    if suffix == ".parquet":
        return config.path, RecordStream(_parquet_records(path), _as_is)
    return config.path, RecordStream(_text_records(path), _as_is)


def _json_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(the file's line number, the line) of each line that is not blank; parsed by _decode_json_line."""
    with path.open("rb") as file:
        for number, line in enumerate(file, start=1):
            if line.strip():
                yield number, line.removeprefix(b"\xef\xbb\xbf") if number == 1 else line


def _decode_json_line(raw: tuple[int, bytes]) -> dict[str, Any]:
    number, line = raw
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise _Unreadable(f"line {number}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    except json.JSONDecodeError as error:
        raise _Unreadable(f"line {number}: not JSON ({error.msg}, column {error.colno})") from None
    if not isinstance(record, dict):
        raise _Unreadable(f"line {number}: a JSON {type(record).__name__} where a record (an object) belongs")
    return record


def _is_json_list(path: Path) -> bool:
    """Whether a .json file holds one list (ShareGPT's form) rather than a record a line."""
    with path.open("rb") as file:
        start = file.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return start.startswith(b"[")


def _json_list_items(path: Path) -> Iterator[dict[str, Any]]:
    """A JSON list's items one at a time (ijson's C parser), so a list of any size costs one item's memory."""
    import ijson  # noqa: PLC0415 - only runs on data need it

    with path.open("rb") as file:
        if file.read(3) != b"\xef\xbb\xbf":  # a byte order mark, which ijson refuses
            file.seek(0)
        for number, item in enumerate(ijson.items(file, "item", use_float=True), start=1):
            if not isinstance(item, dict):
                raise _Unreadable(f"item {number} of the list: a JSON {type(item).__name__}, not a record (an object)")
            yield item


def _csv_records(path: Path) -> Iterator[dict[str, Any]]:
    """Python's csv reader: quoted values may hold newlines and every value is a text, whatever the column's other
    values; a value that is not UTF-8 comes as bytes, which the prompt's reader refuses."""
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if header is None:
            return
        while True:
            line = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                raise _Unreadable(f"line {reader.line_num}: not CSV ({error})") from None
            if not row:
                continue
            if len(row) != len(header):
                raise _Unreadable(f"line {line}: {len(row)} values where the header names {len(header)} columns")
            yield dict(zip(header, map(_csv_value, row), strict=True))


def _csv_value(value: str) -> str | bytes:
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape")
    return value


def _parquet_records(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet  # noqa: PLC0415 - only runs on data need it

    for batch in pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
        yield from batch.to_pylist()


def _text_records(path: Path) -> Iterator[dict[str, Any]]:
    """A prompt a line, as the ``text`` column; blank lines are no prompts."""
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                text = line.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise _Unreadable(f"line {number}: not UTF-8 text (byte {error.start}: {error.reason})") from None
            if text.strip():
                yield {"text": text}


def _open_dataset(config: DatasetDataConfig, path: Path) -> RecordStream:
    datasets = _datasets()
    if path.is_dir() and any((path / marker).is_file() for marker in _SAVED_MARKERS):
        try:
            saved = datasets.load_from_disk(str(path))  # memory-mapped Arrow: nothing is read into memory here
        except Exception as error:  # a damaged folder, in one line
            raise DataError(f"path: {config.path}: cannot read the saved dataset: {describe(error)}") from None
        if isinstance(saved, datasets.DatasetDict):
            saved = saved[_split(config, list(saved))]
        elif config.split is not None:
            raise DataError(f"split: {config.split!r}: {config.path} is a single dataset without splits")
        return RecordStream(saved.to_iterable_dataset(), _as_is)
    looks_like_path = config.path.startswith(("/", ".", "~")) or config.path.count("/") > 1
    if not path.exists() and looks_like_path:
        raise DataError(f"path: {config.path}: no such file or folder")
    loaded = _load_dataset(datasets, config, str(path)) if path.exists() else _load_hub_dataset(datasets, config)
    if isinstance(loaded, datasets.IterableDatasetDict | datasets.DatasetDict):
        loaded = loaded[_split(config, list(loaded))]
    elif config.split is not None:
        raise DataError(f"split: {config.split!r}: {config.path} has no splits")
    return RecordStream(loaded.to_iterable_dataset() if isinstance(loaded, datasets.Dataset) else loaded, _as_is)


def _load_dataset(datasets: Any, config: DatasetDataConfig, path: str, *, streaming: bool = True) -> Any:
    try:
        return datasets.load_dataset(path, name=config.config, streaming=streaming)
    except Exception as error:  # the reader's own complaint (unknown config, no data files), in one line
        raise DataError(f"path: {config.path}: cannot read it as a dataset: {describe(error)}") from None


# Seconds the hub has to answer whether it is there before a hub id is read from the cache alone.
_HUB_TIMEOUT_S = 10.0


def _load_hub_dataset(datasets: Any, config: DatasetDataConfig) -> Any:
    """A hub id: downloaded into the Hugging Face cache ($HF_HOME/datasets) on first use and memory-mapped from
    there. With HF_HUB_OFFLINE set, or when the hub does not answer one request, it is read from that cache alone:
    a machine without the hub fails at once instead of after the hub client's retries."""
    offline = bool(datasets.config.HF_HUB_OFFLINE)
    unreachable = None if offline else _hub_unreachable(config.path)
    if not offline and unreachable is None:
        return _load_dataset(datasets, config, config.path, streaming=False)
    why = "HF_HUB_OFFLINE is set: the Hub is not asked" if offline else f"the Hub does not answer: {unreachable}"
    with _offline(datasets):
        try:
            return datasets.load_dataset(config.path, name=config.config, streaming=True)
        except ConnectionError:  # what datasets raises offline for an id its cache does not hold
            cache = datasets.config.HF_DATASETS_CACHE
            raise DataError(f"path: {config.path}: not in the Hugging Face cache {cache} ({why})") from None
        except Exception as error:  # several configurations there and no config given, or a damaged cache
            cache = datasets.config.HF_DATASETS_CACHE
            raise DataError(
                f"path: {config.path}: not read from the Hugging Face cache {cache} ({why}): {describe(error)}"
            ) from None


def _hub_unreachable(repo_id: str) -> str | None:
    """Why the hub cannot be reached, in words; None when it answered (whatever it answered)."""
    import huggingface_hub  # noqa: PLC0415 - only hub ids need it
    from huggingface_hub.errors import HfHubHTTPError  # noqa: PLC0415 - only hub ids need it

    try:
        huggingface_hub.HfApi().dataset_info(repo_id, timeout=_HUB_TIMEOUT_S)
    except HfHubHTTPError:
        return None  # no such dataset, gated, ...: load_dataset says so in its own words
    except Exception as error:  # no route, no name, refused, timed out
        return f"{huggingface_hub.constants.ENDPOINT}: {describe(error)}"
    return None


@contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """datasets and the hub client in offline mode for one load (both read their flag when called)."""
    import huggingface_hub  # noqa: PLC0415 - only hub ids need it

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def _split(config: DatasetDataConfig, splits: list[str]) -> str:
    if config.split is not None:
        if config.split not in splits:
            raise DataError(f"split: {config.split!r}: {config.path} has the splits {', '.join(splits)}")
        return config.split
    if not splits:
        raise DataError(f"path: {config.path}: the dataset has no splits, no records")
    return "train" if "train" in splits else splits[0]


__all__ = ["DataError", "RecordStream", "data_path", "describe", "open_records"]
