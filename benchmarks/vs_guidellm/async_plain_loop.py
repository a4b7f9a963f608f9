"""vLLM's async engine driven by the plainest loop that does the async backend's job: the reference batchmark's
stream dispatch is held to.

``AsyncLLM`` built as users build it (``AsyncEngineArgs`` with vLLM's defaults plus ``--vllm-config``, its engine
core in a process of its own), the same synthetic requests as batchmark's (``--prompt-tokens`` token ids,
``--output-tokens`` forced output tokens), at most ``--concurrency`` in flight: each of that many coroutines
submits a request, reads its stream of deltas to the end, and submits the next. No warm-up: like batchmark, the
first request is measured. Prints output tokens per second from the first submission to the last token.

Usage: python async_plain_loop.py MODEL_DIR --concurrency 16 --requests 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--vllm-config", default="{}")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from batchmark.runner.data.requests import RequestSpec
    from batchmark.runner.engines.prompts import TokenPromptFactory
    from batchmark.runner.engines.vllm_engine import special_token_ids

    engine_args = {"disable_log_stats": True, **json.loads(args.vllm_config)}
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=args.model, **engine_args))
    tokenizer = llm.get_tokenizer()
    factory = TokenPromptFactory.for_vocabulary(len(tokenizer), special_token_ids(tokenizer), seed=args.seed)
    params = vllm.SamplingParams(
        max_tokens=args.output_tokens,
        min_tokens=args.output_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )
    specs = [RequestSpec(index, args.prompt_tokens, args.output_tokens, -1, 0) for index in range(args.requests)]
    prompts = [TokensPrompt(prompt_token_ids=factory.token_ids(spec)) for spec in specs]
    render = llm.renderer.render_cmpl
    rendered = [render([prompt])[0] for prompt in prompts]  # before the clock starts, as batchmark builds prompts
    started = time.perf_counter()
    produced = asyncio.run(streamed(llm, rendered, params, args.concurrency))
    seconds = time.perf_counter() - started
    llm.shutdown()
    assert produced == args.requests * args.output_tokens, produced
    print(
        json.dumps(
            {
                "loop": "async",
                "requests": args.requests,
                "output_tokens_per_second": produced / seconds,
                "seconds": seconds,
            }
        )
    )


async def streamed(llm: Any, prompts: list[Any], params: Any, concurrency: int) -> int:
    waiting = iter(enumerate(prompts))
    produced = 0

    async def client() -> None:
        nonlocal produced
        for index, prompt in waiting:
            async for output in llm.generate(prompt, params, str(index)):
                produced += len(output.outputs[0].token_ids)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return produced


if __name__ == "__main__":
    main()
