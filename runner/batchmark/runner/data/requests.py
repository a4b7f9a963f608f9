"""Requests: synthetic (lengths drawn once per sample, content made later by the engine's prompt builder) or
the user's own prompts (text read by ``records``, token ids made by the engine's tokenizer)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from batchmark.runner.config.data import DataConfig, RecordsDataConfig, SyntheticTextDataConfig
from batchmark.runner.data.records import LoadedRecords, Prompt, TokenCounter, load_records
from batchmark.runner.results.report import DataSummary
from batchmark.runner.results.stats import Distribution


class RequestSpec(NamedTuple):
    """What the engine side needs to build one request; a tuple so it crosses processes cheaply."""

    request_id: int
    prompt_tokens: int  # unique part; the shared prefix comes on top
    output_tokens: int
    prefix: int  # which shared prefix, -1 for none
    prefix_tokens: int
    prompt: Prompt | None = None  # the user's prompt (text or chat messages); None: synthetic token ids


def _lengths(rng: np.random.Generator, mean: int, stdev: float, low: int | None, high: int | None, n: int) -> list[int]:
    drawn = np.rint(rng.normal(mean, stdev, size=n)) if stdev > 0 else np.full(n, float(mean))
    lower = max(1, low or 1)
    upper = high if high is not None else np.iinfo(np.int64).max
    return [int(value) for value in np.clip(drawn, lower, upper)]


class SyntheticText:
    """Cycles through ``samples`` (prompt, output) length pairs; every request still gets unique content."""

    def __init__(self, config: SyntheticTextDataConfig) -> None:
        self.config = config
        rng = np.random.default_rng(config.seed)
        self._prompt_lengths = _lengths(
            rng,
            config.prompt_tokens,
            config.prompt_tokens_stdev,
            config.prompt_tokens_min,
            config.prompt_tokens_max,
            config.samples,
        )
        self._output_lengths = _lengths(
            rng,
            config.output_tokens,
            config.output_tokens_stdev,
            config.output_tokens_min,
            config.output_tokens_max,
            config.samples,
        )

    def spec(self, index: int) -> RequestSpec:
        sample = index % self.config.samples
        has_prefix = self.config.prefix_tokens > 0
        return RequestSpec(
            index,
            self._prompt_lengths[sample],
            self._output_lengths[sample],
            index % self.config.prefix_count if has_prefix else -1,
            self.config.prefix_tokens if has_prefix else 0,
        )

    def __iter__(self) -> Iterator[RequestSpec]:
        index = 0
        while True:
            yield self.spec(index)
            index += 1


class RecordsData:
    """Cycles through the samples read from the user's data, in the order read (shuffled by seed if asked)."""

    def __init__(
        self, config: RecordsDataConfig, count_tokens: TokenCounter, max_model_len: int | None, tokenizer: str
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.loaded: LoadedRecords = load_records(config, count_tokens, max_model_len)

    def spec(self, index: int) -> RequestSpec:
        sample = self.loaded.samples[index % len(self.loaded.samples)]
        return RequestSpec(index, sample.prompt_tokens, sample.output_tokens, -1, 0, sample.prompt)


DataSource = SyntheticText | RecordsData


def data_summary(config: DataConfig, data: DataSource) -> DataSummary:
    prompts, outputs = Distribution(), Distribution()
    if isinstance(data, RecordsData):
        for sample in data.loaded.samples:
            prompts.add(sample.prompt_tokens)
            outputs.add(sample.output_tokens)
        loaded = data.loaded
        return DataSummary(
            kind=config.kind,
            source=loaded.source,
            content_hash=loaded.content_hash,
            samples=len(loaded.samples),
            records_read=loaded.read,
            skipped_too_long=loaded.skipped_too_long,
            skipped_without_answer=loaded.skipped_without_answer,
            output_lengths_from=loaded.output_tokens_from,
            forced_output_lengths=True,
            tokenizer=data.tokenizer,
            prompt_tokens=prompts.summary(),
            output_tokens=outputs.summary(),
        )
    for index in range(data.config.samples):
        spec = data.spec(index)
        prompts.add(spec.prompt_tokens + spec.prefix_tokens)
        outputs.add(spec.output_tokens)
    return DataSummary(
        kind=config.kind,
        samples=data.config.samples,
        output_lengths_from="output_tokens",
        forced_output_lengths=True,
        prompt_tokens=prompts.summary(),
        output_tokens=outputs.summary(),
    )
