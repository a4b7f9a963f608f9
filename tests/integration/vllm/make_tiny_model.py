"""Build a tiny Llama-architecture model and its tokenizer into a folder, offline (run with .venv-vllm's Python).

Random weights (seeded) saved as safetensors, and a byte-level BPE tokenizer trained here on generated text,
saved with a chat template: everything vLLM needs to load a model from a local path with no model hub.
Hub names are never used: offline, ``from_pretrained("gpt2")`` silently returns an empty tokenizer.

Usage: python make_tiny_model.py OUT_DIR [--hidden-size 128]
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

# Chat template in Hugging Face's style: role headers, then an assistant header for generation.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
VOCAB_SIZE = 2048
WORDS = [
    "batch",
    "token",
    "engine",
    "request",
    "prompt",
    "output",
    "model",
    "cache",
    "latency",
    "throughput",
    "schedule",
    "decode",
    "prefill",
    "queue",
    "kernel",
    "memory",
    "tensor",
    "layer",
    "attention",
    "vector",
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
]


def corpus(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    text = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
        # Digits and punctuation too, so decoded random token ids re-encode to similar lengths.
        words.append(str(rng.randint(0, 100000)))
        text.append(" ".join(words) + rng.choice([".", "!", "?", ",", ";"]))
    return text


def build(out: Path, hidden_size: int, seed: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(5000, seed), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    wrapped.chat_template = CHAT_TEMPLATE
    if len(wrapped) < 100 or not wrapped.encode("batch token engine"):
        raise RuntimeError(f"the trained tokenizer is unusable (vocabulary {len(wrapped)})")
    out.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(out)

    torch.manual_seed(seed)
    heads = max(2, hidden_size // 32)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=2048,
        bos_token_id=wrapped.bos_token_id,
        eos_token_id=wrapped.eos_token_id,
        pad_token_id=wrapped.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "batchmark-tiny-model.json").write_text(json.dumps({"hidden_size": hidden_size, "seed": seed}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.out, args.hidden_size, args.seed)


if __name__ == "__main__":
    main()
