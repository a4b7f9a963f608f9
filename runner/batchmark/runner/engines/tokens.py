"""Counting the user's prompts in the model's tokens before the engine loads, and the context they must fit.

Each engine counts in its own tokens (its entry's ``count_tokens``): the simulated engine's are the text's UTF-8
bytes, exact; vLLM's are the model's own tokenizer, loaded without the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.records import TokenCounter


@dataclass(frozen=True)
class Tokens:
    count: TokenCounter
    max_model_len: int | None  # None: not known before the engine loads (vLLM then rejects a long request alone)
    tokenizer: str  # what counted, for the results


def tokens_for(backends: list[BackendConfig], count_tokens: Callable[[BackendConfig, list[int]], Tokens]) -> Tokens:
    """The counter for the first backend's model; the smallest context any of the (swept) backends asks for."""
    asked = [arguments.get("max_model_len") for arguments in (b.engine_args() for b in backends)]
    given = [value for value in asked if isinstance(value, int) and not isinstance(value, bool)]
    return count_tokens(backends[0], given)
