"""``vllm_config``'s names (and a tensor-parallel size against the model's heads) checked in the main process, in
milliseconds, before any engine loads.

A misspelt engine argument (``max_num_seq``) otherwise fails inside the engine's process after the model
started loading, or, for the simulated engine, is silently ignored. vLLM's names are read from its source:
the fields of ``EngineArgs`` and the parameters of ``LLM.__init__`` (which passes the rest on to
``EngineArgs``). Parsing the two files takes milliseconds; importing vLLM would take seconds and pull torch
into a process that never runs the engine.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import BackendConfig


class EngineArgumentError(ValueError):
    """A vllm_config entry that cannot work; the message names it and, for a typo, the likely name."""


def check_engine_args(config: BackendConfig, check_argument: Callable[[str, Any, bool], None]) -> None:
    """Refuse names vLLM does not know (with a "did you mean") and, through the engine's own ``check_argument``,
    what the engine itself cannot use."""
    known = vllm_engine_arg_names()
    for name, value in config.vllm_config.items():
        if known is not None and name not in known:
            raise EngineArgumentError(
                f"vllm_config.{name}: not an argument of vLLM's engine{did_you_mean(name, known)}"
            )
        check_argument(name, value, known is not None)
    check_model_fits(config)


def check_model_fits(config: BackendConfig) -> None:
    """Refuse a tensor_parallel_size that does not divide the model's attention heads, as vLLM would once the
    engine loads, from the model's config.json where it can be read here (a model folder, or the model in the
    Hugging Face cache); a model not here yet is left to vLLM."""
    size = config.vllm_config.get("tensor_parallel_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 2:
        return
    found = model_config_file(config.model)
    if found is None:
        return
    try:
        settings = json.loads(found.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(settings, dict):
        return
    # A multimodal model keeps its language model's settings under text_config.
    nested = settings.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else settings
    heads = text.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0 and heads % size:
        raise EngineArgumentError(
            f"vllm_config.tensor_parallel_size ({size}) does not divide the model's {heads} attention heads"
            f" (num_attention_heads of {found}): each GPU of a tensor-parallel group holds as many heads"
        )


def model_config_file(model: str) -> Path | None:
    """The model's config.json: in the model's folder, or in the Hugging Face cache's newest snapshot of it."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return folder / "config.json"
    if folder.exists() or model.count("/") != 1:
        return None
    hub_cache = os.environ.get("HF_HUB_CACHE")
    home = Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser()
    hub = Path(hub_cache) if hub_cache else home / "hub"
    snapshots = (hub / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json")
    return max(snapshots, key=lambda path: path.stat().st_mtime, default=None)


def did_you_mean(name: str, known: frozenset[str]) -> str:
    matches = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.75)
    return f"; did you mean {' or '.join(matches)}?" if matches else ""


@functools.cache
def vllm_engine_arg_names() -> frozenset[str] | None:
    """The keyword arguments ``vllm.LLM`` accepts, read from the installed vLLM's source; None without vLLM (or
    when its source does not have the expected shape, in which case vLLM judges the names itself)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        fields = _class_fields(root / "engine" / "arg_utils.py", "EngineArgs")
        parameters = _init_parameters(root / "entrypoints" / "llm.py", "LLM")
    except (OSError, SyntaxError, ValueError):
        return None
    if not fields or "model" not in fields:
        return None
    return frozenset(fields | parameters)


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise ValueError(f"no class {name} in {path}")


def _class_fields(path: Path, name: str) -> set[str]:
    return {
        node.target.id
        for node in _class(path, name).body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not node.target.id.startswith("_")
    }


def _init_parameters(path: Path, name: str) -> set[str]:
    for node in _class(path, name).body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            arguments: list[Any] = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            return {argument.arg for argument in arguments if argument.arg != "self"}
    return set()
