"""Token-id prompts of exact length, unique per request unless a shared prefix is asked for."""

from __future__ import annotations

import numpy as np

from batchmark.runner.data.requests import RequestSpec

_POOL_MIN = 1 << 16
_MARKER_TOKENS = 3


class TokenPromptFactory:
    """Builds prompt token ids from a fixed random pool.

    The first tokens after the shared prefix spell the request's index in base ``span``, so no two requests
    share a first block and prefix caching cannot serve one request's KV cache to another.
    """

    def __init__(self, usable_ids: np.ndarray, seed: int, longest_prompt: int = 0) -> None:
        if usable_ids.size < 2:
            raise ValueError("the tokenizer has fewer than two usable token ids")
        self._ids = usable_ids.astype(np.int64)
        self._span = int(usable_ids.size)
        rng = np.random.default_rng(seed)
        pool_size = max(_POOL_MIN, 2 * longest_prompt + 1)
        self._pool = self._ids[rng.integers(0, self._span, size=pool_size)]
        self._pool_list: list[int] = self._pool.tolist()
        self._prefix_seed = seed
        self._prefixes: dict[int, list[int]] = {}

    @classmethod
    def for_vocabulary(cls, vocab_size: int, excluded: set[int], seed: int) -> TokenPromptFactory:
        ids = np.setdiff1d(np.arange(vocab_size), np.fromiter(excluded, dtype=np.int64, count=len(excluded)))
        return cls(ids, seed)

    def _prefix(self, prefix: int, length: int) -> list[int]:
        cached = self._prefixes.get(prefix)
        if cached is None or len(cached) != length:
            rng = np.random.default_rng((self._prefix_seed, prefix))
            cached = self._ids[rng.integers(0, self._span, size=length)].tolist()
            self._prefixes[prefix] = cached
        return cached

    def token_ids(self, spec: RequestSpec) -> list[int]:
        marker: list[int] = []
        remaining = spec.request_id
        for _ in range(min(_MARKER_TOKENS, spec.prompt_tokens)):
            marker.append(int(self._ids[remaining % self._span]))
            remaining //= self._span
        filler_length = spec.prompt_tokens - len(marker)
        pool = self._pool_list
        if filler_length > len(pool):
            repeats = filler_length // len(pool) + 1
            pool = pool * repeats
        start = (spec.request_id * 7919) % (len(pool) - filler_length + 1)
        body = marker + pool[start : start + filler_length]
        if spec.prefix < 0:
            return body
        return self._prefix(spec.prefix, spec.prefix_tokens) + body
