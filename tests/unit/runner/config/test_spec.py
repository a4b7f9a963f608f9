from typing import Any

import pytest

from batchmark.runner.config.spec import SpecError, parse_spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kind=synthetic_text,prompt_tokens=256", {"kind": "synthetic_text", "prompt_tokens": 256}),
        ("kind=x,rate=1.5,flag=true,name=null", {"kind": "x", "rate": 1.5, "flag": True, "name": None}),
        (
            "vllm_config.max_model_len=4096,vllm_config.dtype=float32",
            {"vllm_config": {"max_model_len": 4096, "dtype": "float32"}},
        ),
        ("rates=[1,2,3],kind=sweep", {"rates": [1, 2, 3], "kind": "sweep"}),
        ('{"kind": "throughput", "max_concurrency": 8}', {"kind": "throughput", "max_concurrency": 8}),
        ("model=Qwen/Qwen3-0.6B", {"model": "Qwen/Qwen3-0.6B"}),
        ("request_format={{ messages[0].content }}", {"request_format": "{{ messages[0].content }}"}),
    ],
)
def test_parses_guidellm_syntax(text: str, expected: dict[str, Any]) -> None:
    assert parse_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty value"),
        ("kind", "is not key=value"),
        ("a=1,a=2", "given twice"),
        ("a=1,a.b=2", "already holds a value"),
        ("{not json", "invalid JSON"),
        ("[1, 2]", "is not key=value"),
    ],
)
def test_rejects_bad_specs_with_a_message(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(text)
