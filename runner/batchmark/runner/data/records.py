"""Prompts from the user's own data: local files, Hugging Face datasets and ShareGPT conversations.

Everything is read as a stream, so a file of any size costs the memory of the samples, not of the file. In the
data's own order records are read until ``samples`` are kept; shuffled, the whole data is read and the samples are
a seeded uniform draw from all of it (each record gets a random key; the ``samples`` smallest keys among the usable
records are kept, so only the samples are held). JSONL is read a line at a time with ``json`` (a line is parsed
only when the shuffle may keep it), a JSON list one item at a time with ``ijson``, CSV with ``csv`` (quoted
newlines; every value a text), Parquet through ``pyarrow``'s batches; saved datasets, folders and hub ids through
``datasets``. Problems are ``DataError``s raised before any engine loads, each naming the field and the file, and
the file's own line where a line is at fault.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from batchmark.runner.config.data import (
    OUTPUT_TOKENS_COLUMN_NAMES,
    PROMPT_COLUMN_NAMES,
    DatasetDataConfig,
    FileDataConfig,
    RecordsDataConfig,
    ShareGptDataConfig,
)
from batchmark.runner.contract import ENV_DATA_DIRECTORY

FILE_EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet", ".txt")
SHAREGPT_EXTENSIONS = (".json", ".jsonl")
_HUMAN = ("human", "user")
_ANSWER = ("gpt", "assistant", "chatgpt", "bard", "model", "bing")
# save_to_disk writes one of these at the top of its folder.
_SAVED_MARKERS = ("dataset_dict.json", "state.json")
# Random keys of the shuffle drawn this many at a time: numpy's cost per call, not per key.
_KEY_CHUNK = 4096
_PARQUET_BATCH_ROWS = 1024

TokenCounter = Callable[[str], int]
# A conversation given as chat messages: (role, content) pairs, for the model's chat template.
Messages = tuple[tuple[str, str], ...]
Prompt = str | Messages


def prompt_text(prompt: Prompt) -> str:
    """The text a prompt is without a chat template: a conversation's contents, a line each."""
    return prompt if isinstance(prompt, str) else "\n".join(content for _, content in prompt)


class DataError(ValueError):
    """The data cannot be used; the message names the field and the file."""


class _Unreadable(ValueError):
    """A line of the file cannot be read as a record; the message names the file's line."""


@dataclass
class Sample:
    prompt: Prompt
    prompt_tokens: int
    output_tokens: int


@dataclass
class LoadedRecords:
    """The samples a run uses, and what the results say about where they came from."""

    samples: list[Sample]
    source: str
    content_hash: str
    read: int  # records read from the data to find the samples (all of them when shuffled)
    skipped_too_long: int
    skipped_without_answer: int = 0
    columns: list[str] = field(default_factory=list)
    output_tokens_from: str = ""


class _Stream(NamedTuple):
    """The data's records as read, and how one becomes a record (a dict): parsing waits until a record is used."""

    raw: Iterable[Any]
    decode: Callable[[Any], dict[str, Any]]
    numbers_as_text: bool = False  # CSV: every value is a text, a number of tokens included


def _as_is(record: Any) -> dict[str, Any]:
    return record  # type: ignore[no-any-return]


def load_records(config: RecordsDataConfig, count_tokens: TokenCounter, max_model_len: int | None) -> LoadedRecords:
    """Read up to ``config.samples`` records; every failure is a DataError."""
    source, stream = _open(config)
    try:
        return _take(config, source, stream, count_tokens, max_model_len)
    except DataError:
        raise
    except Exception as error:  # whatever the reader raises on bad bytes or structure, said in one line
        raise DataError(f"path: {source}: cannot read it: {_describe(error)}") from None


def _datasets() -> Any:
    """Hugging Face datasets (imported on first use: ~80 MB), printing no progress bars or warnings."""
    import datasets  # noqa: PLC0415 - heavy; only data it alone reads needs it

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    logging.getLogger("datasets").setLevel(logging.ERROR)
    return datasets


def _describe(error: BaseException) -> str:
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


def _open(config: RecordsDataConfig) -> tuple[str, _Stream]:
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
        return config.path, _Stream(_json_lines(path), _decode_json_line)
    if suffix == ".json":
        return config.path, _Stream(_json_list_items(path), _as_is)
    if suffix == ".csv":
        return config.path, _Stream(_csv_records(path), _as_is, numbers_as_text=True)
    if suffix == ".parquet":
        return config.path, _Stream(_parquet_records(path), _as_is)
    return config.path, _Stream(_text_records(path), _as_is)


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


def _open_dataset(config: DatasetDataConfig, path: Path) -> _Stream:
    datasets = _datasets()
    if path.is_dir() and any((path / marker).is_file() for marker in _SAVED_MARKERS):
        try:
            saved = datasets.load_from_disk(str(path))  # memory-mapped Arrow: nothing is read into memory here
        except Exception as error:  # a damaged folder, in one line
            raise DataError(f"path: {config.path}: cannot read the saved dataset: {_describe(error)}") from None
        if isinstance(saved, datasets.DatasetDict):
            saved = saved[_split(config, list(saved))]
        elif config.split is not None:
            raise DataError(f"split: {config.split!r}: {config.path} is a single dataset without splits")
        return _Stream(saved.to_iterable_dataset(), _as_is)
    looks_like_path = config.path.startswith(("/", ".", "~")) or config.path.count("/") > 1
    if not path.exists() and looks_like_path:
        raise DataError(f"path: {config.path}: no such file or folder")
    loaded = _load_dataset(datasets, config, str(path)) if path.exists() else _load_hub_dataset(datasets, config)
    if isinstance(loaded, datasets.IterableDatasetDict | datasets.DatasetDict):
        loaded = loaded[_split(config, list(loaded))]
    elif config.split is not None:
        raise DataError(f"split: {config.split!r}: {config.path} has no splits")
    return _Stream(loaded.to_iterable_dataset() if isinstance(loaded, datasets.Dataset) else loaded, _as_is)


def _load_dataset(datasets: Any, config: DatasetDataConfig, path: str, *, streaming: bool = True) -> Any:
    try:
        return datasets.load_dataset(path, name=config.config, streaming=streaming)
    except Exception as error:  # the reader's own complaint (unknown config, no data files), in one line
        raise DataError(f"path: {config.path}: cannot read it as a dataset: {_describe(error)}") from None


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
    why = "HF_HUB_OFFLINE is set" if offline else f"the hub does not answer: {unreachable}"
    with _offline(datasets):
        try:
            return datasets.load_dataset(config.path, name=config.config, streaming=True)
        except ConnectionError:  # what datasets raises offline for an id its cache does not hold
            cache = datasets.config.HF_DATASETS_CACHE
            raise DataError(f"path: {config.path}: not in the Hugging Face cache {cache} ({why})") from None
        except Exception as error:  # several configurations there and no config given, or a damaged cache
            cache = datasets.config.HF_DATASETS_CACHE
            raise DataError(
                f"path: {config.path}: not read from the Hugging Face cache {cache} ({why}): {_describe(error)}"
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
        return f"{huggingface_hub.constants.ENDPOINT}: {_describe(error)}"
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


class _Judge:
    """Makes a record a Sample, or counts why it is none (no answer, too long for the context)."""

    def __init__(self, read_prompt: Reader, count_tokens: TokenCounter, max_model_len: int | None) -> None:
        self.read_prompt, self.count_tokens, self.max_model_len = read_prompt, count_tokens, max_model_len
        self.examined = self.too_long = self.without_answer = 0
        self.first_too_long: tuple[int, int, int] | None = None

    def sample(self, record: dict[str, Any], number: int, drawn_output: int) -> Sample | None:
        self.examined += 1
        pair = self.read_prompt(record, number)
        if pair is None:
            self.without_answer += 1
            return None
        prompt, output = pair
        prompt_tokens = self.count_tokens(prompt_text(prompt))
        if output is None:
            output_tokens = drawn_output
        elif isinstance(output, str):
            output_tokens = max(1, self.count_tokens(output))
        else:
            output_tokens = output
        if self.max_model_len is not None and prompt_tokens + output_tokens > self.max_model_len:
            self.too_long += 1
            self.first_too_long = self.first_too_long or (number, prompt_tokens, output_tokens)
            return None
        return Sample(prompt, prompt_tokens, output_tokens)


def _take(
    config: RecordsDataConfig,
    source: str,
    stream: _Stream,
    count_tokens: TokenCounter,
    max_model_len: int | None,
) -> LoadedRecords:
    raw = iter(stream.raw)
    first_raw = next(raw, None)
    if first_raw is None:
        raise DataError(f"path: {source}: the data set is empty (no records)")
    first = stream.decode(first_raw)
    columns = list(first)
    read_prompt, output_from = _readers(config, source, columns, numbers_as_text=stream.numbers_as_text)
    judge = _Judge(read_prompt, count_tokens, max_model_len)
    records = chain([first_raw], raw)
    take = _draw_uniformly if config.shuffle else _take_in_order
    samples, read = take(config, records, lambda item, number: first if number == 1 else stream.decode(item), judge)
    if judge.too_long and config.too_long == "refuse":
        assert judge.first_too_long is not None
        row, prompt_tokens, output_tokens = judge.first_too_long
        raise DataError(
            f"too_long: {source}: {judge.too_long} of the {judge.examined} records"
            f" {'drawn' if config.shuffle else 'read'} do not fit the model's context of {max_model_len} tokens"
            f" (the first, record {row}: {prompt_tokens} prompt + {output_tokens} output tokens); shorten them,"
            " raise vllm_config.max_model_len, or give too_long=skip to leave them out"
        )
    if not samples:
        why = f" ({judge.too_long} too long for the context, skipped)" if judge.too_long else ""
        if judge.without_answer:
            why += f" ({judge.without_answer} conversations without a human turn and an answer)"
        raise DataError(f"path: {source}: no usable records{why}")
    digest = hashlib.sha256()
    for sample in samples:
        prompt = sample.prompt
        encoded = prompt.encode() if isinstance(prompt, str) else json.dumps(prompt).encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded + sample.output_tokens.to_bytes(8, "little"))
    return LoadedRecords(
        samples=samples,
        source=source,
        content_hash="sha256:" + digest.hexdigest(),
        read=read,
        skipped_too_long=judge.too_long,
        skipped_without_answer=judge.without_answer,
        columns=columns,
        output_tokens_from=output_from,
    )


Decode = Callable[[Any, int], dict[str, Any]]


def _take_in_order(
    config: RecordsDataConfig, records: Iterator[Any], decode: Decode, judge: _Judge
) -> tuple[list[Sample], int]:
    """The first ``samples`` usable records, reading no further; the i-th sample's drawn output length is the
    i-th drawn."""
    drawn_outputs = _drawn_output_lengths(config)
    samples: list[Sample] = []
    read = 0
    for read, item in enumerate(records, start=1):
        sample = judge.sample(decode(item, read), read, drawn_outputs[len(samples)])
        if sample is not None:
            samples.append(sample)
            if len(samples) == config.samples:
                break
    return samples, read


def _draw_uniformly(
    config: RecordsDataConfig, records: Iterator[Any], decode: Decode, judge: _Judge
) -> tuple[list[Sample], int]:
    """A seeded uniform draw of ``samples`` usable records from the whole data, in a random order: every record
    gets a random key and the usable records with the smallest keys are kept (a heap of the samples, nothing
    more). A record is decoded and judged only when its key would enter the heap: about samples x (1 + ln(records
    / samples)) of them. Drawn output lengths go to the judged records in turn."""
    key_rng = np.random.default_rng([config.seed, 1])  # a stream apart from the drawn output lengths'
    drawn_outputs = _drawn_output_stream(config)
    kept: list[tuple[float, int, Sample]] = []  # (-key, record number, sample): the largest key on top
    read = 0
    keys: Iterator[float] = iter(())
    for read, item in enumerate(records, start=1):
        key = next(keys, None)
        if key is None:
            keys = iter(key_rng.random(_KEY_CHUNK).tolist())
            key = next(keys)
        if len(kept) == config.samples and key >= -kept[0][0]:
            continue
        sample = judge.sample(decode(item, read), read, next(drawn_outputs))
        if sample is None:
            continue
        if len(kept) == config.samples:
            heapq.heapreplace(kept, (-key, read, sample))
        else:
            heapq.heappush(kept, (-key, read, sample))
    return [sample for _, _, sample in sorted(kept, reverse=True)], read


# A record -> (prompt, output length: tokens, a text whose tokens are counted, or None for drawn), or None to skip.
Reader = Callable[[dict[str, Any], int], "tuple[Prompt, int | str | None] | None"]


def _readers(
    config: RecordsDataConfig, source: str, columns: list[str], *, numbers_as_text: bool = False
) -> tuple[Reader, str]:
    """How a record becomes (prompt, output length or None); and where output lengths come from, in words. With
    ``numbers_as_text`` (CSV) an output length is the text of a number."""
    listed = ", ".join(columns)
    if isinstance(config, ShareGptDataConfig):
        if config.conversations_column not in columns:
            raise DataError(
                f"conversations_column: {source} has no column {config.conversations_column!r}; its columns: {listed}"
            )
        return _conversation_reader(config.conversations_column, source), "the first answer's length"
    if config.prompt_column is not None:
        if config.prompt_column not in columns:
            raise DataError(f"prompt_column: {source} has no column {config.prompt_column!r}; its columns: {listed}")
        prompt_column = config.prompt_column
    else:
        found = next((name for name in PROMPT_COLUMN_NAMES if name in columns), None)
        if found is None:
            raise DataError(
                f"prompt_column: {source} has none of the usual prompt columns ({', '.join(PROMPT_COLUMN_NAMES)});"
                f" name one with prompt_column=; its columns: {listed}"
            )
        prompt_column = found
    output_column = config.output_tokens_count_column
    if output_column is not None and output_column not in columns:
        raise DataError(f"output_tokens_count_column: {source} has no column {output_column!r}; its columns: {listed}")
    if output_column is None:
        output_column = next((name for name in OUTPUT_TOKENS_COLUMN_NAMES if name in columns), None)

    def read(record: dict[str, Any], number: int) -> tuple[Prompt, int | str | None]:
        prompt: Any = record.get(prompt_column)
        if isinstance(prompt, list):
            prompt = _messages(prompt, f"prompt_column: {source}: record {number}: {prompt_column!r}")
        if isinstance(prompt, bytes):  # what the CSV reader makes of a column that is not UTF-8
            raise DataError(f"prompt_column: {source}: record {number}: {prompt_column!r} is not UTF-8 text")
        if not isinstance(prompt, str | tuple) or not prompt:
            raise DataError(
                f"prompt_column: {source}: record {number} has no prompt text in {prompt_column!r}"
                f" (found {type(prompt).__name__})"
            )
        if output_column is None:
            return prompt, None
        length = record.get(output_column)
        if numbers_as_text and isinstance(length, str):
            length = _number(length)
        if isinstance(length, float) and length.is_integer():
            length = int(length)
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise DataError(
                f"output_tokens_count_column: {source}: record {number} has {length!r} in {output_column!r},"
                " not a positive whole number of tokens"
            )
        return prompt, length

    where = f"column {output_column!r}" if output_column is not None else "output_tokens"
    return read, where


def _messages(turns: list[Any], where: str) -> Messages:
    """Chat messages ({role, content} each) as the chat template takes them."""
    messages = []
    for turn in turns:
        role, content = (turn.get("role"), turn.get("content")) if isinstance(turn, dict) else (None, None)
        if not isinstance(role, str) or not isinstance(content, str):
            raise DataError(f"{where}: a list of chat messages needs a role and a content text in each")
        messages.append((role, content))
    return tuple(messages)


def _conversation_reader(column: str, source: str) -> Reader:
    def read(record: dict[str, Any], number: int) -> tuple[str, int | str | None] | None:
        turns = record.get(column)
        if not isinstance(turns, list):
            raise DataError(f"conversations_column: {source}: record {number} has no list of turns in {column!r}")
        for index, turn in enumerate(turns[:-1]):
            if _speaker(turn) in _HUMAN and _speaker(turns[index + 1]) in _ANSWER:
                prompt, answer = _text(turn), _text(turns[index + 1])
                if prompt and answer:
                    return prompt, answer  # its length is counted in the model's tokens
        return None

    return read


def _speaker(turn: Any) -> str:
    if not isinstance(turn, dict):
        return ""
    speaker = turn.get("from", turn.get("role", ""))
    return speaker.lower() if isinstance(speaker, str) else ""


def _text(turn: Any) -> str:
    text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
    return text if isinstance(text, str) else ""


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _drawn_output_lengths(config: RecordsDataConfig, rng: np.random.Generator | None = None) -> list[int]:
    rng = rng or np.random.default_rng(config.seed)
    n = config.samples
    mean, stdev = config.output_tokens, config.output_tokens_stdev
    drawn = np.rint(rng.normal(mean, stdev, size=n)) if stdev > 0 else np.full(n, float(mean))
    upper = config.output_tokens_max if config.output_tokens_max is not None else np.iinfo(np.int64).max
    return [int(value) for value in np.clip(drawn, max(1, config.output_tokens_min or 1), upper)]


def _drawn_output_stream(config: RecordsDataConfig) -> Iterator[int]:
    """Drawn output lengths without end, ``samples`` at a time from one seeded generator."""
    rng = np.random.default_rng(config.seed)
    while True:
        yield from _drawn_output_lengths(config, rng)


__all__ = ["DataError", "FileDataConfig", "LoadedRecords", "Sample", "load_records"]
