"""Prompts from the user's own data: local files, Hugging Face datasets and ShareGPT conversations.

Everything is read as a stream: records are read until ``samples`` are kept, so a file of any size costs the
memory of the samples, not of the file. JSONL, CSV and Parquet files go through ``pyarrow``'s block readers
(Hugging Face ``datasets`` alone costs ~80 MB of imports and reads in large chunks); a JSON list, saved
datasets, folders and hub ids through ``datasets``. Problems are ``DataError``s raised before any engine loads,
each naming the field and the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

# Records held for a seeded shuffle of a stream: enough to mix a file well, few enough to bound memory.
SHUFFLE_BUFFER = 10_000
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
SHAREGPT_EXTENSIONS = (".json", ".jsonl")
_HUMAN = ("human", "user")
_ANSWER = ("gpt", "assistant", "chatgpt", "bard", "model", "bing")
# save_to_disk writes one of these at the top of its folder.
_SAVED_MARKERS = ("dataset_dict.json", "state.json")

TokenCounter = Callable[[str], int]
# A conversation given as chat messages: (role, content) pairs, for the model's chat template.
Messages = tuple[tuple[str, str], ...]
Prompt = str | Messages


def prompt_text(prompt: Prompt) -> str:
    """The text a prompt is without a chat template: a conversation's contents, a line each."""
    return prompt if isinstance(prompt, str) else "\n".join(content for _, content in prompt)


class DataError(ValueError):
    """The data cannot be used; the message names the field and the file."""


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
    read: int  # records read from the data to find the samples
    skipped_too_long: int
    skipped_without_answer: int = 0
    columns: list[str] = field(default_factory=list)
    output_tokens_from: str = ""


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


def _open(config: RecordsDataConfig) -> tuple[str, Iterable[dict[str, Any]]]:
    path = data_path(config.path)
    if isinstance(config, DatasetDataConfig):
        return _open_dataset(config, path)
    if not path.exists():
        raise DataError(f"path: {config.path}: no such file")
    if not path.is_file():
        raise DataError(f"path: {config.path}: not a file (a folder is read with kind=dataset)")
    suffix = path.suffix.lower()
    allowed = SHAREGPT_EXTENSIONS if isinstance(config, ShareGptDataConfig) else tuple(FILE_BUILDERS)
    if suffix not in allowed:
        raise DataError(f"path: {config.path}: the file name must end in one of {', '.join(allowed)}")
    if path.stat().st_size == 0:
        raise DataError(f"path: {config.path}: the data set is empty (no records)")
    if suffix in _ARROW_READERS:
        return config.path, _shuffled(config, _ARROW_READERS[suffix](path))
    datasets = _datasets()  # a JSON list is read whole: use JSONL for large files

    try:
        stream = datasets.load_dataset(FILE_BUILDERS[suffix], data_files=str(path), split="train", streaming=True)
    except Exception as error:  # the reader's own complaint, in one line
        raise DataError(f"path: {config.path}: cannot read it: {_describe(error)}") from None
    return config.path, _shuffled(config, stream)


# Bytes per block the readers parse at a time: bounds their memory whatever the file's size.
_BLOCK_BYTES = 1 << 20
_PARQUET_BATCH_ROWS = 1024


def _line_blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks of whole lines, about _BLOCK_BYTES each (a longer line makes a longer block)."""
    with path.open("rb") as file:
        rest = b""
        while chunk := file.read(_BLOCK_BYTES):
            block = rest + chunk
            end = block.rfind(b"\n") + 1
            if end:
                yield block[:end]
            rest = block[end:]
        if rest.strip():
            yield rest


def _jsonl_records(path: Path) -> Iterator[dict[str, Any]]:
    """One block of lines at a time through pyarrow's JSON parser, on this thread. pyarrow's own streaming reader
    (open_json) reads blocks ahead on its threads and costs +50 MB more over the first ten blocks of a JSONL (the
    seeded shuffle's 10000 records of 1 KiB), benchmarks/notes/data-memory.md."""
    import pyarrow.json  # noqa: PLC0415 - only runs on data need it

    for block in _line_blocks(path):
        options = pyarrow.json.ReadOptions(use_threads=False, block_size=len(block) + 1)
        yield from pyarrow.json.read_json(pyarrow.py_buffer(block), read_options=options).to_pylist()


def _csv_records(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.csv  # noqa: PLC0415 - only runs on data need it

    reader = pyarrow.csv.open_csv(path, read_options=pyarrow.csv.ReadOptions(block_size=_BLOCK_BYTES))
    for batch in reader:
        yield from batch.to_pylist()


def _parquet_records(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet  # noqa: PLC0415 - only runs on data need it

    for batch in pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
        yield from batch.to_pylist()


def _text_records(path: Path) -> Iterator[dict[str, Any]]:
    """A prompt a line, as the ``text`` column; blank lines are no prompts."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            text = line.rstrip("\r\n")
            if text.strip():
                yield {"text": text}


_ARROW_READERS: dict[str, Callable[[Path], Iterator[dict[str, Any]]]] = {
    ".jsonl": _jsonl_records,
    ".csv": _csv_records,
    ".parquet": _parquet_records,
    ".txt": _text_records,
}


def _open_dataset(config: DatasetDataConfig, path: Path) -> tuple[str, Iterable[dict[str, Any]]]:
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
        return config.path, _shuffled(config, saved.to_iterable_dataset())
    looks_like_path = config.path.startswith(("/", ".", "~")) or config.path.count("/") > 1
    if not path.exists() and looks_like_path:
        raise DataError(f"path: {config.path}: no such file or folder")
    try:
        loaded = datasets.load_dataset(str(path) if path.exists() else config.path, name=config.config, streaming=True)
    except Exception as error:  # the reader's own complaint (unknown config, no data files), in one line
        raise DataError(f"path: {config.path}: cannot read it as a dataset: {_describe(error)}") from None
    if isinstance(loaded, datasets.IterableDatasetDict):
        loaded = loaded[_split(config, list(loaded))]
    elif config.split is not None:
        raise DataError(f"split: {config.split!r}: {config.path} has no splits")
    return config.path, _shuffled(config, loaded)


def _split(config: DatasetDataConfig, splits: list[str]) -> str:
    if config.split is not None:
        if config.split not in splits:
            raise DataError(f"split: {config.split!r}: {config.path} has the splits {', '.join(splits)}")
        return config.split
    if not splits:
        raise DataError(f"path: {config.path}: the dataset has no splits, no records")
    return "train" if "train" in splits else splits[0]


def _shuffled(config: RecordsDataConfig, stream: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    return _buffer_shuffle(stream, config.seed) if config.shuffle else stream


def _buffer_shuffle(stream: Iterable[dict[str, Any]], seed: int) -> Iterator[dict[str, Any]]:
    """A seeded shuffle through a bounded buffer: each record read takes a random place in it and pushes out the
    record there. The same records and seed give the same order, whichever reader read them."""
    rng = np.random.default_rng(seed)
    buffer: list[dict[str, Any]] = []
    for record in stream:
        if len(buffer) < SHUFFLE_BUFFER:
            buffer.append(record)
            continue
        place = int(rng.integers(SHUFFLE_BUFFER))
        yield buffer[place]
        buffer[place] = record
    rng.shuffle(buffer)
    yield from buffer


def _take(
    config: RecordsDataConfig,
    source: str,
    stream: Iterable[dict[str, Any]],
    count_tokens: TokenCounter,
    max_model_len: int | None,
) -> LoadedRecords:
    records = iter(stream)
    first = next(records, None)
    if first is None:
        raise DataError(f"path: {source}: the data set is empty (no records)")
    columns = list(first)
    read_prompt, output_from = _readers(config, source, columns)
    drawn_outputs = _drawn_output_lengths(config)
    samples: list[Sample] = []
    digest = hashlib.sha256()
    read = too_long = without_answer = 0
    first_too_long: tuple[int, int, int] | None = None
    for number, record in enumerate(_chain(first, records), start=1):
        read = number
        pair = read_prompt(record, number)
        if pair is None:
            without_answer += 1
            continue
        prompt, output = pair
        prompt_tokens = count_tokens(prompt_text(prompt))
        if output is None:
            output_tokens = drawn_outputs[len(samples)]
        elif isinstance(output, str):
            output_tokens = max(1, count_tokens(output))
        else:
            output_tokens = output
        if max_model_len is not None and prompt_tokens + output_tokens > max_model_len:
            too_long += 1
            first_too_long = first_too_long or (number, prompt_tokens, output_tokens)
            continue
        samples.append(Sample(prompt, prompt_tokens, output_tokens))
        encoded = prompt.encode() if isinstance(prompt, str) else json.dumps(prompt).encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded + output_tokens.to_bytes(8, "little"))
        if len(samples) == config.samples:
            break
    if too_long and config.too_long == "refuse":
        assert first_too_long is not None
        row, prompt_tokens, output_tokens = first_too_long
        raise DataError(
            f"too_long: {source}: {too_long} of the {read} records read do not fit the model's context of"
            f" {max_model_len} tokens (the first, record {row}: {prompt_tokens} prompt + {output_tokens} output"
            " tokens); shorten them, raise vllm_config.max_model_len, or give too_long=skip to leave them out"
        )
    if not samples:
        why = f" ({too_long} too long for the context, skipped)" if too_long else ""
        why += f" ({without_answer} conversations without a human turn and an answer)" if without_answer else ""
        raise DataError(f"path: {source}: no usable records{why}")
    return LoadedRecords(
        samples=samples,
        source=source,
        content_hash="sha256:" + digest.hexdigest(),
        read=read,
        skipped_too_long=too_long,
        skipped_without_answer=without_answer,
        columns=columns,
        output_tokens_from=output_from,
    )


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


# A record -> (prompt, output length: tokens, a text whose tokens are counted, or None for drawn), or None to skip.
Reader = Callable[[dict[str, Any], int], "tuple[Prompt, int | str | None] | None"]


def _readers(config: RecordsDataConfig, source: str, columns: list[str]) -> tuple[Reader, str]:
    """How a record becomes (prompt, output length or None); and where output lengths come from, in words."""
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


def _drawn_output_lengths(config: RecordsDataConfig) -> list[int]:
    rng = np.random.default_rng(config.seed)
    n = config.samples
    mean, stdev = config.output_tokens, config.output_tokens_stdev
    drawn = np.rint(rng.normal(mean, stdev, size=n)) if stdev > 0 else np.full(n, float(mean))
    upper = config.output_tokens_max if config.output_tokens_max is not None else np.iinfo(np.int64).max
    return [int(value) for value in np.clip(drawn, max(1, config.output_tokens_min or 1), upper)]


__all__ = ["DataError", "FileDataConfig", "LoadedRecords", "Sample", "load_records"]
