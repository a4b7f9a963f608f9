"""batchmark's simulated engine under vLLM's module name, for the side-by-side benchmark only.

run.py's ``simulated_vllm_path()`` (a temporary folder whose ``vllm`` links here) first on a process's
``PYTHONPATH`` makes ``import vllm`` there give this package, named ``vllm``: GuideLLM's ``vllm_python_batch``
backend, batchmark's real-engine adapter (``engine=vllm``) and the ideal ``generate()`` timings then all drive the
same simulated engine through vLLM's own API (``LLM``, ``EngineArgs``, ``LLM.from_engine_args``, ``generate``,
``get_tokenizer``, ``llm_engine.add_request``/``step``), with GPU-like step times from batchmark's cost model
instead of this CPU's. As in vLLM, ``generate()`` adds its prompts to ``llm_engine`` and calls
``llm_engine.step()`` until they are done, so one engine step is one ``step()`` call in either dispatch mode and a
wrapper around ``LLMEngine.step`` sees them all.

Text prompts (GuideLLM sends text) are tokenized with the model folder's own tokenizer, as vLLM would.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from batchmark.runner.engines.simulated import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    CompletionOutput,
    RequestOutput,
    SamplingParams,
    SimulatedLLM,
    SimulatedLLMEngine,
    TokensPrompt,
)

__version__ = "0.32.0+batchmark-simulated"
__all__ = ["LLM", "CompletionOutput", "EngineArgs", "LLMEngine", "RequestOutput", "SamplingParams", "TokensPrompt"]

# The simulated GPU's speed can be scaled for quick runs; 1.0 is real time.
TIME_SCALE = float(os.environ.get("BATCHMARK_SIM_TIME_SCALE", "1.0"))


@dataclass
class EngineArgs:
    """The keywords GuideLLM passes through; anything else is kept and ignored."""

    model: str
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_model_len: int = 4096

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.max_num_seqs = int(kwargs.pop("max_num_seqs", DEFAULT_MAX_NUM_SEQS) or DEFAULT_MAX_NUM_SEQS)
        self.max_num_batched_tokens = int(
            kwargs.pop("max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS) or DEFAULT_MAX_NUM_BATCHED_TOKENS
        )
        self.max_model_len = int(kwargs.pop("max_model_len", 4096) or 4096)
        self.extra = kwargs


class LLMEngine(SimulatedLLMEngine):
    """``LLM.llm_engine`` with the ``model_config`` vLLM's has."""

    def __init__(self, llm: SimulatedLLM) -> None:
        super().__init__(llm)
        self.model_config = SimpleNamespace(max_model_len=llm.max_model_len, dtype="simulated")


class LLM:
    """``vllm.LLM`` backed by batchmark's simulated engine."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        args = EngineArgs(model, **kwargs)
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(model)
        self._llm = SimulatedLLM(
            model=model,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=args.max_model_len,
            time_scale=TIME_SCALE,
            vocab_size=len(self._tokenizer),
        )
        self.llm_engine = LLMEngine(self._llm)
        self._request_ids = itertools.count()

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> LLM:
        return cls(
            engine_args.model,
            max_num_seqs=engine_args.max_num_seqs,
            max_num_batched_tokens=engine_args.max_num_batched_tokens,
            max_model_len=engine_args.max_model_len,
        )

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def _tokens(self, prompt: Any) -> TokensPrompt:
        if isinstance(prompt, str):
            return TokensPrompt(prompt_token_ids=list(self._tokenizer.encode(prompt, add_special_tokens=False)))
        if isinstance(prompt, dict) and "prompt" in prompt:
            return self._tokens(prompt["prompt"])
        return TokensPrompt(prompt_token_ids=list(prompt["prompt_token_ids"]))

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = False,
        **_: Any,
    ) -> list[RequestOutput]:
        """As vLLM's: every prompt is added to the engine, then ``llm_engine.step()`` runs until all finished."""
        prompt_list = [self._tokens(prompt) for prompt in ([prompts] if isinstance(prompts, str | dict) else prompts)]
        params_list = self._llm._params_per_prompt(prompt_list, sampling_params)
        added: list[str] = []
        try:
            for prompt, params in zip(prompt_list, params_list, strict=True):
                request_id = str(next(self._request_ids))
                self.llm_engine.add_request(request_id, prompt, params)
                added.append(request_id)
        except Exception:
            self.llm_engine.abort_request(added)  # vLLM takes back what it added, then raises for the call
            raise
        outputs: list[RequestOutput] = []
        while self.llm_engine.has_unfinished_requests():
            outputs.extend(output for output in self.llm_engine.step() if output.finished)
        return sorted(outputs, key=lambda output: int(output.request_id))

    def shutdown(self) -> None:
        return None
