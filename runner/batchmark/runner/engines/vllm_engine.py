"""The real engine: ``vllm.LLM`` with engine stats on, prompts as token ids, one SamplingParams per request."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from batchmark.runner.backend.prompts import TokenPromptFactory
from batchmark.runner.config import BackendConfig
from batchmark.runner.data import RequestSpec
from batchmark.runner.engines.base import Engine, EngineInfo, GenerateEngine


class _VllmTokenPrompts:
    def __init__(self, factory: TokenPromptFactory, tokens_prompt: Any) -> None:
        self._factory = factory
        self._tokens_prompt = tokens_prompt

    def build(self, spec: RequestSpec) -> tuple[Any, Hashable]:
        token_ids = self._factory.token_ids(spec)
        return self._tokens_prompt(prompt_token_ids=token_ids), tuple(token_ids)

    def output_key(self, output: Any) -> Hashable:
        return tuple(output.prompt_token_ids)


def load_vllm_engine(config: BackendConfig, seed: int) -> Engine:
    import vllm  # noqa: PLC0415 - imported only in the engine's process
    from vllm.inputs import TokensPrompt  # noqa: PLC0415

    engine_args = {"disable_log_stats": False, **config.engine_args()}
    llm = vllm.LLM(**engine_args)
    tokenizer = llm.get_tokenizer()
    excluded = set(getattr(tokenizer, "all_special_ids", []) or [])
    factory = TokenPromptFactory.for_vocabulary(len(tokenizer), excluded, seed)

    def sampling_params(spec: RequestSpec) -> Any:
        return vllm.SamplingParams(
            max_tokens=spec.output_tokens,
            min_tokens=spec.output_tokens,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
        )

    info = EngineInfo(
        kind="vllm",
        model=config.model,
        version=getattr(vllm, "__version__", None),
        max_model_len=getattr(llm.llm_engine.model_config, "max_model_len", None),
    )
    return GenerateEngine(llm, _VllmTokenPrompts(factory, TokensPrompt), sampling_params, info)
