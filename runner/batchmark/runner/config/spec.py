"""GuideLLM's option syntax: ``kind=X,key=value,...`` (values read as YAML, dotted keys nest) or a JSON object."""

from __future__ import annotations

import json
from typing import Any

import yaml

_TEMPLATE_MARKERS = ("{{", "{%", "{#")


class SpecError(ValueError):
    """A spec string that cannot be read; the message says where."""


def parse_spec(text: str) -> dict[str, Any]:
    """Read one option value into a dict.

    ``kind=synthetic_text,prompt_tokens=256,vllm_config.max_model_len=4096`` gives
    ``{"kind": "synthetic_text", "prompt_tokens": 256, "vllm_config": {"max_model_len": 4096}}``.
    """
    stripped = text.strip()
    if not stripped:
        raise SpecError("empty value; expected kind=NAME,key=value,... or a JSON object")
    if stripped.startswith("{"):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise SpecError(f"invalid JSON: {error.msg} at column {error.colno}") from None
        if not isinstance(loaded, dict):
            raise SpecError("a JSON value must be an object")
        return loaded
    result: dict[str, Any] = {}
    for item in _split_top_level(stripped):
        key, separator, raw_value = item.partition("=")
        key = key.strip()
        if not separator or not key:
            raise SpecError(f"{item!r} is not key=value")
        _assign(result, key.split("."), _parse_value(raw_value.strip()), key)
    return result


def parse_sweep(text: str) -> dict[str, Any]:
    """One ``--sweep`` value: ``FIELD=V1,V2,...`` (values read as YAML, a dotted field nests) or a JSON object.

    ``vllm_config.max_num_seqs=64,128`` gives ``{"vllm_config": {"max_num_seqs": [64, 128]}}``.
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        return parse_spec(stripped)
    key, separator, raw = stripped.partition("=")
    key = key.strip()
    if not separator or not key or not raw.strip():
        raise SpecError(f"{text!r} is not FIELD=VALUE,VALUE,... (e.g. batch_size=8,16,32)")
    raw = raw.strip()
    values: Any = (
        _parse_value(raw) if raw.startswith("[") else [_parse_value(part.strip()) for part in _split_top_level(raw)]
    )
    if not isinstance(values, list):
        raise SpecError(f"{key}: expected a list of values, got {raw!r}")
    result: dict[str, Any] = {}
    _assign(result, key.split("."), values, key)
    return result


def _parse_value(raw: str) -> Any:
    if raw == "" or any(marker in raw for marker in _TEMPLATE_MARKERS):
        # Free text such as an inline Jinja2 template is kept as written.
        return raw
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        # Free text such as a Jinja2 template ("{{ messages }}") is not YAML; keep it as written.
        return raw


def _assign(target: dict[str, Any], path: list[str], value: Any, full_key: str) -> None:
    node = target
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecError(f"{full_key!r}: {part!r} already holds a value, not a mapping")
        node = child
    if path[-1] in node:
        raise SpecError(f"{full_key!r} is given twice")
    node[path[-1]] = value


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are outside brackets, braces and quotes (``rates=[1,2]`` stays whole)."""
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    current: list[str] = []
    for char in text:
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]
