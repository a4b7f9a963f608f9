"""Prompts from the user's own data: local files, Hugging Face datasets and ShareGPT conversations, made samples.

In the data's own order records are read until ``samples`` are kept. Shuffled, the whole data is read and the
samples are a seeded uniform draw from all of it: each record gets a random key and the usable records with the
``samples`` smallest keys are kept, so only the samples are held, whatever the data's size or its records'. Where
the records come from is ``sources``. Problems are ``DataError``s raised before any engine loads, each naming the
field and the file.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from batchmark.runner.config.data import (
    OUTPUT_TOKENS_COLUMN_NAMES,
    PROMPT_COLUMN_NAMES,
    RecordsDataConfig,
    ShareGptDataConfig,
)
from batchmark.runner.data.sources import DataError, RecordStream, describe, open_records

_HUMAN = ("human", "user")
_ANSWER = ("gpt", "assistant", "chatgpt", "bard", "model", "bing")
# Random keys of the shuffle drawn this many at a time: numpy's cost per call, not per key.
_KEY_CHUNK = 4096

TokenCounter = Callable[[str], int]
# A conversation given as chat messages: (role, content) pairs, for the model's chat template.
Messages = tuple[tuple[str, str], ...]
Prompt = str | Messages


def prompt_text(prompt: Prompt) -> str:
    """The text a prompt is without a chat template: a conversation's contents, a line each."""
    return prompt if isinstance(prompt, str) else "\n".join(content for _, content in prompt)


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


def load_records(config: RecordsDataConfig, count_tokens: TokenCounter, max_model_len: int | None) -> LoadedRecords:
    """The samples: the data's first usable records, or a uniform draw from all of it; every failure a DataError."""
    source, stream = open_records(config)
    try:
        return _take(config, source, stream, count_tokens, max_model_len)
    except DataError:
        raise
    except Exception as error:  # whatever the reader raises on bad bytes or structure, said in one line
        raise DataError(f"path: {source}: cannot read it: {describe(error)}") from None


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
    stream: RecordStream,
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


_Decode = Callable[[Any, int], dict[str, Any]]


def _take_in_order(
    config: RecordsDataConfig, records: Iterator[Any], decode: _Decode, judge: _Judge
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
    config: RecordsDataConfig, records: Iterator[Any], decode: _Decode, judge: _Judge
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


__all__ = ["DataError", "LoadedRecords", "Sample", "load_records"]
