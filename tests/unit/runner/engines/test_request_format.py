"""A synthetic request's content in a template holds the requested number of tokens, template tokens on top.

The tokenizer here is a small greedy one whose encoding of decoded ids is not those ids ("a", "b" decode to
"ab", which encodes as one token), the way a real BPE tokenizer's is not; the real tokenizer's case is checked
on the real engine (tests/integration/vllm/engine_checks.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.prompts import TokenPromptFactory
from batchmark.runner.engines.request_format import ChatPromptBuilder, fitted_text, parse_request_format

PIECES = ["<s>", "</s>", "ab", "ba", "a", "b", "c", " ", "[user]", "[assistant]"]


class GreedyTokenizer:
    """Longest piece first, left to right: "ab" is one token however it came to be written."""

    bos_token = "<s>"
    eos_token = "</s>"

    def decode(self, token_ids: list[int], **kwargs: Any) -> str:
        return "".join(PIECES[token_id] for token_id in token_ids)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        ids = []
        at = 0
        by_length = sorted(range(len(PIECES)), key=lambda index: -len(PIECES[index]))
        while at < len(text):
            index = next(index for index in by_length if text.startswith(PIECES[index], at))
            ids.append(index)
            at += len(PIECES[index])
        return ids

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> str:
        return "".join(f"[{message['role']}]{message['content']} " for message in conversation) + "[assistant]"


def test_the_text_of_ids_that_merge_is_fitted_to_their_count() -> None:
    tokenizer = GreedyTokenizer()
    ids = [4, 5, 4, 5, 6, 4, 5, 4]  # a b a b c a b a: "abab" re-encodes as two tokens
    assert len(tokenizer.encode(tokenizer.decode(ids))) < len(ids)
    text = fitted_text(tokenizer, ids)
    assert len(tokenizer.encode(text)) == len(ids)


def test_text_that_already_holds_is_kept() -> None:
    tokenizer = GreedyTokenizer()
    ids = [2, 6, 3, 6]  # ab c ba c: its own encoding
    assert fitted_text(tokenizer, ids) == "abcbac"


def test_a_templated_synthetic_prompt_carries_the_requested_content_tokens() -> None:
    tokenizer = GreedyTokenizer()
    factory = TokenPromptFactory(np.array([2, 3, 4, 5, 6]), seed=3)
    builder = ChatPromptBuilder(parse_request_format("default-template"), tokenizer, factory, dict)
    template_tokens = len(tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": ""}])))
    for request_id in range(50):
        token_ids = builder.token_ids(RequestSpec(request_id, 40, 4, -1, 0))
        assert len(token_ids) == 40 + template_tokens
