"""Counting the user's prompts in the model's tokens before the engine loads, and the context they must fit.

The simulated engine's tokens are the text's UTF-8 bytes (its prompt builder makes the same ids), so counts are
exact there; for vLLM the model's own tokenizer is loaded (no weights), the one the engine will use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.records import DataError, TokenCounter
from batchmark.runner.engines.simulated import DEFAULT_MAX_MODEL_LEN


@dataclass(frozen=True)
class Tokens:
    count: TokenCounter
    max_model_len: int | None  # None: not known before the engine loads (vLLM then rejects a long request alone)
    tokenizer: str  # what counted, for the results


def tokens_for(backends: list[BackendConfig]) -> Tokens:
    """The counter for the first backend's model; the smallest context any of the (swept) backends asks for."""
    backend = backends[0]
    asked = [arguments.get("max_model_len") for arguments in (b.engine_args() for b in backends)]
    given = [value for value in asked if isinstance(value, int) and not isinstance(value, bool)]
    if backend.engine == "simulated":
        return Tokens(lambda text: len(text.encode("utf-8")), min(given, default=DEFAULT_MAX_MODEL_LEN), "utf-8 bytes")
    tokenizer = _hf_tokenizer(backend.model)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    limit = min(given) if given else _model_context(backend.model)
    return Tokens(count, limit, f"{backend.model} tokenizer")


def _hf_tokenizer(model: str) -> Any:
    try:
        from transformers import AutoTokenizer  # noqa: PLC0415 - comes with vLLM; only runs on data need it
    except ImportError:
        raise DataError(
            "prompt lengths: counting the prompts in the model's tokens needs `transformers` (installed with vLLM)"
        ) from None
    try:
        return AutoTokenizer.from_pretrained(model)
    except Exception as error:  # a missing or broken tokenizer, in one line
        raise DataError(
            f"prompt lengths: cannot load the tokenizer of {model}: {type(error).__name__}: {error}"
        ) from None


def _model_context(model: str) -> int | None:
    """The model's own context length where its config is a local file; otherwise unknown until it loads."""
    config = Path(model) / "config.json"
    try:
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    limit = values.get("max_position_embeddings") if isinstance(values, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else None
