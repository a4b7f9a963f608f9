"""vLLM driven by the plainest loops that do batchmark's job, the references batchmark's dispatch is held to.

* ``chunked``: ``LLM.generate()`` over consecutive chunks of ``batch_size`` requests, back to back: what batch
  dispatch would reach with no harness at all;
* ``engine_loop``: ``llm_engine.add_request`` while fewer than ``batch_size`` requests are in flight, then one
  ``llm_engine.step()``, again and again: what continuous dispatch would reach with no harness at all.

The engine is built as users build it (``vllm.LLM`` with vLLM's defaults plus ``--vllm-config``), in vLLM's
default multiprocessing mode unless the environment says otherwise, and the requests are batchmark's own
synthetic ones (``--prompt-tokens`` token ids, ``--output-tokens`` forced output tokens). No warm-up: like
batchmark, the first engine call is the first measured one. Run under engine_busy.py's probe, the figures are
taken the same way as every tool's; alone, it prints its own output tokens per second.

Usage: python plain_loop.py MODEL_DIR --loop chunked --batch-size 32 --requests 1024
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--loop", choices=("chunked", "engine_loop"), required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--vllm-config", default="{}")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import vllm
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    from batchmark.runner.data.requests import RequestSpec
    from batchmark.runner.engines.prompts import TokenPromptFactory
    from batchmark.runner.engines.vllm_engine import special_token_ids

    llm = vllm.LLM(model=args.model, **json.loads(args.vllm_config))
    tokenizer = llm.get_tokenizer()
    factory = TokenPromptFactory.for_vocabulary(len(tokenizer), special_token_ids(tokenizer), seed=args.seed)
    params = vllm.SamplingParams(
        max_tokens=args.output_tokens,
        min_tokens=args.output_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )
    specs = [RequestSpec(index, args.prompt_tokens, args.output_tokens, -1, 0) for index in range(args.requests)]
    prompts = [TokensPrompt(prompt_token_ids=factory.token_ids(spec)) for spec in specs]
    loop = chunked if args.loop == "chunked" else engine_loop
    started = time.perf_counter()
    produced = loop(llm, prompts, params, args.batch_size)
    seconds = time.perf_counter() - started
    assert produced == args.requests * args.output_tokens, produced
    print(json.dumps({"loop": args.loop, "output_tokens_per_second": produced / seconds, "seconds": seconds}))
    llm.llm_engine.engine_core.shutdown()


def chunked(llm: Any, prompts: list[Any], params: Any, batch_size: int) -> int:
    produced = 0
    for start in range(0, len(prompts), batch_size):
        outputs = llm.generate(prompts[start : start + batch_size], params, use_tqdm=False)
        produced += sum(len(output.outputs[0].token_ids) for output in outputs)
    return produced


def engine_loop(llm: Any, prompts: list[Any], params: Any, cap: int) -> int:
    engine = llm.llm_engine
    render = engine.renderer.render_cmpl
    waiting = iter(prompts)
    in_flight = 0
    produced = 0
    added = 0
    while True:
        while in_flight < cap and added < len(prompts):
            (rendered,) = render([next(waiting)])
            engine.add_request(str(added), rendered, params)
            added += 1
            in_flight += 1
        if not in_flight:
            return produced
        for output in engine.step():
            if output.finished:
                in_flight -= 1
                produced += len(output.outputs[0].token_ids)


if __name__ == "__main__":
    main()
