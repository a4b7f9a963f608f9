"""Drive the real vLLM engine through batchmark's engine layer and record what it did (run with .venv-vllm).

One engine load serves every check, so the test that runs this costs one vLLM start-up. The test asserts on
the JSON this writes; this script only observes.

Usage: python engine_checks.py MODEL_DIR OUT_JSON MAX_MODEL_LEN
"""

from __future__ import annotations

import json
import math
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.engines.base import Completion, GenerateEngine, WorkItem
from batchmark.runner.engines.prompts import TokenPromptFactory
from batchmark.runner.engines.request_format import (
    ChatPromptBuilder,
    RequestFormatError,
    fitted_text,
    parse_request_format,
)
from batchmark.runner.engines.vllm_engine import load_vllm_engine, special_token_ids

JINJA = "### Question\n{% for m in messages %}{{ m['content'] }}{% endfor %}\n### Answer\n"
BROKEN_JINJA = "{{ messages[0]['content'] | no_such_filter }}"


def item(request_id: int, prompt_tokens: int, output_tokens: int) -> WorkItem:
    now = time.monotonic()
    return WorkItem(RequestSpec(request_id, prompt_tokens, output_tokens, -1, 0), now, now)


def record(completion: Completion) -> dict[str, Any]:
    timings = completion.timings._asdict()
    return {
        "request_id": completion.request_id,
        "prompt_tokens": completion.prompt_tokens,
        "output_tokens": completion.output_tokens,
        "error": completion.error,
        "timings": {name: None if math.isnan(value) else value for name, value in timings.items()},
    }


def check_continuous(engine: GenerateEngine, max_model_len: int, results: dict[str, Any]) -> None:
    # Continuous: requests added while the engine runs, one of them invalid.
    finished: list[Completion] = []
    rejected = [c for c in (engine.add(i) for i in (item(11, 40, 12), item(12, max_model_len + 1, 3))) if c]
    steps = 0
    late_added = False
    while engine.in_flight():
        finished.extend(engine.step())
        steps += 1
        if steps == 3 and not late_added:
            # Joins the running batch mid-flight; must still come back with its exact length.
            late = engine.add(item(13, 20, 6))
            assert late is None, late
            late_added = True
    results["continuous"] = [record(c) for c in rejected + finished]
    results["continuous_steps"] = steps
    results["continuous_counted_steps"] = engine.clock.steps() - results["batch_steps"]


def check_request_formats(engine: GenerateEngine, results: dict[str, Any]) -> None:
    # Request formats on the real tokenizer, each run through the engine.
    tokenizer = engine.llm.get_tokenizer()
    factory = TokenPromptFactory.for_vocabulary(len(tokenizer), special_token_ids(tokenizer), seed=7)
    from vllm.inputs import TokensPrompt

    formats: dict[str, Any] = {}
    for name in ("plain", "default-template", JINJA):
        builder = ChatPromptBuilder(parse_request_format(name), tokenizer, factory, TokensPrompt)
        builder.probe()
        spec = RequestSpec(21, 24, 3, -1, 0)
        token_ids = builder.token_ids(spec)
        formatted = GenerateEngine(engine.llm, builder, engine.sampling_params, engine.info)
        [completion] = formatted.run_batch([WorkItem(spec, time.monotonic(), time.monotonic())])
        formats["jinja" if name == JINJA else name] = {
            "text": tokenizer.decode(token_ids),
            "prompt_token_ids": len(token_ids),
            "completion": record(completion),
        }
    results["formats"] = formats
    # Synthetic content in a template: exactly the requested tokens, the template's own on top.
    templated = ChatPromptBuilder(parse_request_format("default-template"), tokenizer, factory, TokensPrompt)
    specs = [RequestSpec(request_id, 256, 1, -1, 0) for request_id in range(40)]
    results["fitted_content_tokens"] = [
        len(tokenizer.encode(fitted_text(tokenizer, factory.token_ids(spec)), add_special_tokens=False))
        for spec in specs
    ]
    results["unfitted_content_tokens"] = [
        len(tokenizer.encode(tokenizer.decode(factory.token_ids(spec)), add_special_tokens=False)) for spec in specs
    ]
    results["default_template_prompt_tokens"] = [len(templated.token_ids(spec)) for spec in specs]
    try:
        ChatPromptBuilder(parse_request_format(BROKEN_JINJA), tokenizer, factory, TokensPrompt).probe()
        results["broken_template"] = None
    except RequestFormatError as error:
        results["broken_template"] = str(error)


def main() -> None:
    model, out, max_model_len = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    config = VllmPythonBatchBackendConfig(
        model=model,
        engine="vllm",
        request_format="plain",
        # Per-request stats on (vllm.LLM's default is off): the timings checked below come from them.
        vllm_config={"dtype": "float32", "max_model_len": max_model_len, "seed": 0, "disable_log_stats": False},
    )
    results: dict[str, Any] = {}
    started = time.monotonic()
    engine = load_vllm_engine(config, seed=7)
    results["load_seconds"] = time.monotonic() - started
    assert isinstance(engine, GenerateEngine)
    results["info"] = {"kind": engine.info.kind, "version": engine.info.version, "details": engine.info.details}
    results["typed_prompts"] = engine.engine_input is not None
    results["stat_loggers_dropped"] = engine.llm.llm_engine.logger_manager is None

    # Batch: one generate() per batch; the too-long prompt (id 3) must fail alone.
    batch = [item(1, 32, 5), item(2, 64, 9), item(3, max_model_len + 50, 4), item(4, 16, 1), item(5, 100, 17)]
    results["batch"] = [record(c) for c in engine.run_batch(batch)]
    # generate() runs the engine's steps inside; the runner counts them where generate calls them.
    results["batch_steps"] = engine.clock.steps()
    results["batch_engine_seconds"] = engine.clock.seconds

    check_continuous(engine, max_model_len, results)
    check_request_formats(engine, results)

    # vLLM's default multiprocessing: its engine core is a child process, which close() must end.
    results["engine_children"] = [child.name for child in multiprocessing.active_children()]
    started = time.monotonic()
    engine.close()
    results["close_seconds"] = time.monotonic() - started
    for child in multiprocessing.active_children():
        child.join(timeout=2)  # vLLM SIGKILLs an engine core that outlasts its shutdown timeout without reaping it
    results["children_after_close"] = [child.name for child in multiprocessing.active_children()]
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
