"""``vllm_config``'s names checked in the main process, in milliseconds, before any engine loads.

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
from pathlib import Path
from typing import Any

from batchmark.runner.config.backend import BackendConfig

# What the simulated engine reads from vllm_config; it ignores the other vLLM names.
SIMULATED_ENGINE_ARGS = frozenset({"max_num_seqs", "max_num_batched_tokens", "max_model_len"})


class EngineArgumentError(ValueError):
    """A vllm_config entry that cannot work; the message names it and, for a typo, the likely name."""


def check_engine_args(config: BackendConfig) -> None:
    """Refuse names the engine does not know (with a "did you mean") and values the simulated engine cannot use."""
    known = vllm_engine_arg_names()
    for name, value in config.vllm_config.items():
        if known is not None:
            if name not in known:
                raise EngineArgumentError(
                    f"vllm_config.{name}: not an argument of vLLM's engine{_did_you_mean(name, known)}"
                )
        elif config.engine == "simulated" and name not in SIMULATED_ENGINE_ARGS:
            # Without vLLM only the simulated engine's own names are known: a near miss of one is a typo, any
            # other name may be meant for vLLM and is left alone.
            hint = _did_you_mean(name, SIMULATED_ENGINE_ARGS)
            if hint:
                raise EngineArgumentError(f"vllm_config.{name}: not an argument the simulated engine reads{hint}")
        if config.engine == "simulated" and name == "max_model_len" and not (isinstance(value, int) and value >= 1):
            raise EngineArgumentError(
                f"vllm_config.max_model_len: the simulated engine needs a number of tokens, got {value!r}"
            )


def _did_you_mean(name: str, known: frozenset[str]) -> str:
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
