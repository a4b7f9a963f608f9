"""Synthetic requests: lengths drawn once per sample, content made later by the engine's prompt builder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from batchmark.runner.config import SyntheticTextDataConfig


class RequestSpec(NamedTuple):
    """What the engine side needs to build one request; a tuple so it crosses processes cheaply."""

    request_id: int
    prompt_tokens: int  # unique part; the shared prefix comes on top
    output_tokens: int
    prefix: int  # which shared prefix, -1 for none
    prefix_tokens: int


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
