"""The simulated engine's tokenizer: one token per UTF-8 byte, so counts made before a run are exact."""

from __future__ import annotations


def byte_tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))
