"""``batchmark``: the command line. Bad input exits 2 with one clear message and writes nothing."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_snake
from rich.console import Console

from batchmark.runner import __version__
from batchmark.runner.backend.worker import WorkerFailed
from batchmark.runner.benchmark import BenchmarkRunner
from batchmark.runner.config import RunConfig
from batchmark.runner.console import ConsoleObserver, print_summary
from batchmark.runner.engines.factory import EngineUnavailable
from batchmark.runner.events import RunObserver
from batchmark.runner.outputs import write_report
from batchmark.runner.spec import SpecError, parse_spec

EXIT_USAGE = 2
EXIT_FAILED = 1
_OPTION_OF_FIELD = {
    "backend": "--backend",
    "data": "--data",
    "profile": "--profile",
    "constraints": "--constraint",
    "outputs": "--output",
    "sample_requests": "--sample-requests",
    "name": "--name",
}


class UsageError(Exception):
    """Bad input: printed as one message, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchmark", description="Benchmark vLLM batch throughput.")
    parser.add_argument("--version", action="version", version=f"batchmark {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run a benchmark",
        description="Run a benchmark. Options take GuideLLM's spec syntax (kind=X,key=value,... with YAML "
        "values and dotted keys for nesting) or a JSON object; they override --config.",
    )
    run.add_argument("--config", type=Path, help="YAML or JSON file with the run's configuration")
    run.add_argument("--name", help="benchmark name (labels, file names)")
    run.add_argument("--backend", help="e.g. kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8")
    run.add_argument("--data", help="e.g. kind=synthetic_text,prompt_tokens=256,output_tokens=128")
    run.add_argument("--profile", help="e.g. kind=throughput,max_concurrency=20")
    run.add_argument("--constraint", action="append", default=[], help="e.g. kind=max_requests,count=100 (repeatable)")
    run.add_argument(
        "--output", action="append", default=[], help="write results to PATH (.json, .yaml, .csv; repeatable)"
    )
    run.add_argument("--sample-requests", type=int, help="per-request records kept in the results")
    run.add_argument("--quiet", action="store_true", help="no progress bar or banner; the summary only")
    return parser


def load_config(args: argparse.Namespace) -> RunConfig:
    """Merge --config with the options given on the command line and validate the whole."""
    merged: dict[str, Any] = _read_config_file(args.config) if args.config else {}
    for field in ("backend", "data", "profile"):
        text = getattr(args, field)
        if text is not None:
            merged[field] = _merge_spec(merged.get(field), _spec(f"--{field}", text))
    if args.constraint:
        merged["constraints"] = [_spec("--constraint", text) for text in args.constraint]
    if args.output:
        merged["outputs"] = list(args.output)
    if args.name is not None:
        merged["name"] = args.name
    if args.sample_requests is not None:
        merged["sample_requests"] = args.sample_requests
    for field in ("backend", "data", "profile"):
        if field not in merged:
            raise UsageError(f"{_OPTION_OF_FIELD[field]} is required (or give it in --config)")
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as error:
        raise UsageError(describe_validation_error(error)) from None
    _check_outputs_writable(config.outputs)
    return config


def _spec(option: str, text: str) -> dict[str, Any]:
    try:
        return parse_spec(text)
    except SpecError as error:
        raise UsageError(f"{option}: {error}") from None


def _merge_spec(base: Any, override: dict[str, Any]) -> dict[str, Any]:
    """The command line overrides the file key by key, unless it names another kind."""
    override = _snake_case_keys(override)
    if not isinstance(base, dict) or ("kind" in override and override["kind"] != base.get("kind", override["kind"])):
        return override
    merged = _snake_case_keys(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_spec(merged[key], value)
        else:
            merged[key] = value
    return merged


def _snake_case_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """One spelling per key, so a camelCase file and a snake_case option override each other.

    vllm_config is passed through to vLLM as written.
    """
    normalised: dict[str, Any] = {}
    for key, value in mapping.items():
        name = to_snake(key)
        normalised[name] = _snake_case_keys(value) if isinstance(value, dict) and name != "vllm_config" else value
    return normalised


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--config: cannot read {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UsageError(
            f"--config: {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path} must hold a mapping with backend, data, profile and constraints")
    return data


def _check_outputs_writable(outputs: Sequence[str]) -> None:
    for output in outputs:
        directory = Path(output).resolve().parent
        existing = directory
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK):
            raise UsageError(f"--output: cannot write {output}: {existing} is not a writable directory")


def describe_validation_error(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        location = [str(part) for part in problem["loc"]]
        option = _OPTION_OF_FIELD.get(location[0], location[0]) if location else "config"
        # Drop the discriminator tag pydantic puts in the path of tagged unions.
        path = [part for part in location[1:] if not _is_union_tag(part)]
        field = ".".join(path) if path else "(value)"
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        elif problem["type"] == "union_tag_invalid":
            expected = problem.get("ctx", {}).get("expected_tags", "")
            message = f"unknown kind {problem['input'].get('kind')!r}; allowed: {expected}"
        elif problem["type"] == "union_tag_not_found":
            message = "kind is required"
        elif "input" in problem and not isinstance(problem["input"], dict):
            message += f" (got {problem['input']!r})"
        lines.append(f"{option}: {field}: {message}")
    return "\n".join(lines)


def _is_union_tag(part: str) -> bool:
    return part in {
        "vllm_python_batch",
        "synthetic_text",
        "synchronous",
        "concurrent",
        "throughput",
        "constant",
        "poisson",
        "sweep",
        "max_requests",
        "max_duration",
        "min_requests",
        "max_errors",
        "max_error_rate",
    }


class _StopOnSignal:
    """First SIGINT or SIGTERM: stop cleanly and keep the results so far. A second SIGINT: stop now."""

    def __init__(self, runner: BenchmarkRunner) -> None:
        self.runner = runner
        self.received: int | None = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._handle)
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is not None and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = number
        self.runner.stop_reason = f"interrupted by {signal.Signals(number).name}"
        self.runner.stop.set()


def run_command(args: argparse.Namespace, extra_observers: Sequence[RunObserver] = ()) -> int:
    console = Console(stderr=True, quiet=False)
    try:
        config = load_config(args)
    except UsageError as error:
        console.print(f"[bold red]batchmark run: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    observers: list[RunObserver] = [ConsoleObserver(console, show_progress=not args.quiet), *extra_observers]
    runner = BenchmarkRunner(config, observers)
    stopper = _StopOnSignal(runner)
    stopper.install()
    try:
        runner.check()
        runner.start()
        report = runner.run()
        for output in config.outputs:
            write_report(report, Path(output))
    except EngineUnavailable as error:
        console.print(f"[bold red]batchmark run: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    except WorkerFailed as error:
        console.print(f"[bold red]batchmark run: the engine failed:[/] {error}", highlight=False)
        return EXIT_FAILED
    finally:
        runner.close()
    print_summary(Console(), report)
    for output in config.outputs:
        console.print(f"wrote {output}")
    if stopper.received is not None:
        return 128 + stopper.received
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run_command(args)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
