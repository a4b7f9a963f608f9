"""A run's configuration from what the user gave: a --config file merged with the command line's options, checked
whole. Bad input raises ``UsageError`` with one message that names the option and the field.

Used by ``batchmark run`` and by the operator's ``batchmark manifest``; it knows the options' names but not the
parser, so nothing here imports the command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from batchmark.runner.config.output_paths import output_problem, store_problem
from batchmark.runner.config.run import UNION_TAGS, RunConfig
from batchmark.runner.config.safeload import UnusableFile, read_document
from batchmark.runner.config.spec import SpecError, parse_spec, parse_sweep
from batchmark.runner.config.store import store_location
from batchmark.runner.lifecycle.start_method import mp_context_name

# Deeper nesting than this in a config is a mistake, and far deeper would exhaust Python's recursion limit.
MAX_NESTING = 32
_OPTION_OF_FIELD = {
    "backend": "--backend",
    "data": "--data",
    "profile": "--profile",
    "constraints": "--constraint",
    "outputs": "--output",
    "sample_requests": "--sample-requests",
    "name": "--name",
    "sweep": "--sweep",
    "slo": "--slo",
    "cost": "--gpu-cost-per-hour",
    "repeats": "--repeats",
    "store": "--store",
    "baseline": "--baseline",
}

# Fields inside a section that have an option of their own.
_OPTION_OF_NESTED_FIELD = {
    ("sweep", "warmup_requests"): "--sweep-warmup",
    ("cost", "gpus"): "--gpus",
}


class UsageError(Exception):
    """Bad input: printed as one message, exit code 2."""


def load_config(args: argparse.Namespace) -> RunConfig:
    """Merge --config with the options given on the command line and validate the whole.

    Keys are read in one spelling (snake_case) first, so a camelCase file and a snake_case option override
    each other; one mapping that gives a key in both spellings is a contradiction and an error.
    """
    merged: dict[str, Any] = _normalised(_read_config_file(args.config), "--config") if args.config else {}
    for field in ("backend", "data", "profile"):
        text = getattr(args, field)
        if text is not None:
            option = f"--{field}"
            merged[field] = _merge_spec(merged.get(field), _normalised(_spec(option, text), option))
    if args.constraint:
        merged["constraints"] = [_normalised(_spec("--constraint", text), "--constraint") for text in args.constraint]
    if args.output:
        merged["outputs"] = list(args.output)
    if args.name is not None:
        merged["name"] = args.name
    if args.sample_requests is not None:
        merged["sample_requests"] = args.sample_requests
    if getattr(args, "repeats", None) is not None:
        merged["repeats"] = args.repeats
    for option in ("store", "baseline"):
        if getattr(args, option, None) is not None:
            merged[option] = getattr(args, option)
    swept_on_the_command_line: set[str] = set()
    for text in getattr(args, "sweep", None) or []:
        try:
            override = _normalised(parse_sweep(text), "--sweep")
        except SpecError as error:
            raise UsageError(f"--sweep: {error}") from None
        for field in _swept_fields(override):
            if field in swept_on_the_command_line:
                raise UsageError(f"--sweep: {field}: given twice; list all its values in one --sweep")
            swept_on_the_command_line.add(field)
        merged["sweep"] = _merge_spec(merged.get("sweep"), override)
    if getattr(args, "sweep_warmup", None) is not None:
        merged["sweep"] = {**(merged.get("sweep") or {}), "warmup_requests": args.sweep_warmup}
    if getattr(args, "slo", None) is not None:
        merged["slo"] = _spec("--slo", args.slo)  # target names as written: parse_slo_name reads both spellings
    if getattr(args, "gpu_cost_per_hour", None) is not None:
        merged["cost"] = _merge_spec(merged.get("cost"), {"gpu_cost_per_hour": args.gpu_cost_per_hour})
    if getattr(args, "gpus", None) is not None:
        merged["cost"] = _merge_spec(merged.get("cost"), {"gpus": args.gpus})
    for field in ("backend", "data", "profile"):
        if field not in merged:
            raise UsageError(f"{_OPTION_OF_FIELD[field]} is required (or give it in --config)")
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as error:
        raise UsageError(describe_validation_error(error)) from None
    _check_writable(config, [args.config] if args.config else [])
    try:
        mp_context_name()
    except ValueError as error:
        raise UsageError(str(error)) from None
    return config


def _check_writable(config: RunConfig, inputs: list[Path]) -> None:
    """Every output file and the store can be written, found before any work is done."""
    for output in config.outputs:
        problem = output_problem(Path(output), inputs)
        if problem is not None:
            raise UsageError(f"--output: {output}: {problem}")
    if config.store is not None:
        problem = store_problem(store_location(config.store))
        if problem is not None:
            raise UsageError(f"--store: {config.store}: {problem}")


def _swept_fields(sweep: dict[str, Any]) -> list[str]:
    """The dotted backend fields one --sweep names (vllm_config.NAME for each vLLM argument)."""
    fields: list[str] = []
    for name, values in sweep.items():
        if name == "vllm_config" and isinstance(values, dict):
            fields += [f"vllm_config.{argument}" for argument in values]
        else:
            fields.append(name)
    return fields


def _spec(option: str, text: str) -> dict[str, Any]:
    try:
        return parse_spec(text)
    except SpecError as error:
        raise UsageError(f"{option}: {error}") from None
    except RecursionError:
        raise UsageError(f"{option}: nested too deeply") from None


def _merge_spec(base: Any, override: dict[str, Any]) -> dict[str, Any]:
    """The command line overrides the file key by key, unless it names another kind."""
    if not isinstance(base, dict) or ("kind" in override and override["kind"] != base.get("kind", override["kind"])):
        return override
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_spec(merged[key], value)
        else:
            merged[key] = value
    return merged


def _normalised(value: Any, where: str, path: tuple[str, ...] = ()) -> Any:
    """Every key in snake_case, checked: keys are strings, no key comes in two spellings, nesting is bounded.

    vllm_config is passed through to vLLM as written (vLLM's own names), but its keys and depth are checked too;
    so are slo's target names (request_latency_p999 is not a field name: to_snake would split it).
    """
    if len(path) > MAX_NESTING:
        raise UsageError(f"{where}: {'.'.join(path[:3])}...: nested more than {MAX_NESTING} levels deep")
    if isinstance(value, list):
        return [_normalised(item, where, (*path, str(index))) for index, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    inside_vllm_config = "vllm_config" in path or path == ("slo",)
    normalised: dict[str, Any] = {}
    spelling: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            location = ".".join(path) or "(top level)"
            raise UsageError(f"{where}: {location}: key {key!r} is not a string")
        name = key if inside_vllm_config else to_snake(key)
        if name in spelling:
            field = ".".join((*path, name))
            raise UsageError(f"{where}: {field}: given twice, as {spelling[name]} and {key}")
        spelling[name] = key
        normalised[name] = _normalised(item, where, (*path, name))
    return normalised


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = read_document(path, "--config", "a run config")
    except UnusableFile as error:
        raise UsageError(str(error)) from None
    if not isinstance(data, dict):
        raise UsageError(
            f"--config: {path}: not a run config: it holds no mapping of backend, data, profile and constraints"
        )
    return data


def describe_validation_error(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        location = [str(part) for part in problem["loc"]]
        option = _OPTION_OF_FIELD.get(location[0], location[0]) if location else "config"
        # Drop the discriminator tag pydantic puts in the path of tagged unions.
        path = [part for part in location[1:] if not _is_union_tag(part)]
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        elif problem["type"] == "union_tag_invalid":
            expected = problem.get("ctx", {}).get("expected_tags", "")
            message = f"unknown kind {problem['input'].get('kind')!r}; allowed: {expected}"
        elif problem["type"] == "union_tag_not_found":
            message = "kind is required"
        elif "input" in problem and not isinstance(problem["input"], dict) and location[:1] != ["store"]:
            # Never the store's: its message shows what may be shown (an s3:// URL may carry a secret).
            message += f" (got {problem['input']!r})"
        if len(location) > 1:
            option = _OPTION_OF_NESTED_FIELD.get((location[0], location[1]), option)
        lines.append(f"{option}: {'.'.join(path)}: {message}" if path else f"{option}: {message}")
    return "\n".join(lines)


def _is_union_tag(part: str) -> bool:
    return part in UNION_TAGS
