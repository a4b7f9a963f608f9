"""``batchmark``: the command line. Bad input exits 2 with one clear message and writes nothing."""

from __future__ import annotations

import argparse
import contextlib
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
from rich.markup import escape

from batchmark.runner import __version__
from batchmark.runner.backend.process_group import engine_processes, leftover_engines_warning
from batchmark.runner.backend.request_format import RequestFormatError
from batchmark.runner.backend.worker import WorkerFailed
from batchmark.runner.benchmark import BenchmarkRunner
from batchmark.runner.config import UNION_TAGS, RunConfig
from batchmark.runner.console import ConsoleObserver, print_summary
from batchmark.runner.engines.factory import EngineUnavailable
from batchmark.runner.events import RunObserver
from batchmark.runner.htmlreport.render import print_comparison, render, render_report, write_html
from batchmark.runner.metrics import DEFAULT_LINGER_SECONDS, MetricsObserver, MetricsServer
from batchmark.runner.outputs import load_report, write_report
from batchmark.runner.pushgateway import push_results, run_succeeded
from batchmark.runner.results import RunReport
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
        "--output",
        action="append",
        default=[],
        help="write results to PATH (.json, .yaml, .csv, or .html: a self-contained report; repeatable)",
    )
    run.add_argument("--sample-requests", type=int, help="per-request records kept in the results")
    run.add_argument("--quiet", action="store_true", help="no progress bar or banner; the summary only")
    run.add_argument(
        "--metrics-port",
        type=_port,
        help="serve Prometheus metrics on this port at /metrics while the run lasts (0: any free port; default: off)",
    )
    run.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address the metrics server binds (default 127.0.0.1; 0.0.0.0 inside a pod, for Prometheus)",
    )
    run.add_argument(
        "--metrics-linger",
        type=_seconds,
        default=DEFAULT_LINGER_SECONDS,
        metavar="SECONDS",
        help="keep serving metrics this long after the run, so the last values are scraped (default: "
        f"{DEFAULT_LINGER_SECONDS:g}, one default scrape interval; a signal ends it early)",
    )
    run.add_argument(
        "--pushgateway",
        metavar="URL",
        help="push the final results to this Prometheus Pushgateway (job=batchmark, grouped by --name)",
    )
    report = commands.add_parser(
        "report",
        help="render a saved result as a self-contained HTML report",
        description="Render a results file (.json or .yaml, as `batchmark run --output` wrote it) as one "
        "self-contained HTML file that opens offline.",
    )
    report.add_argument("results", type=Path, help="results file (.json, .yaml)")
    report.add_argument("-o", "--output", type=Path, required=True, help="HTML file to write")
    compare = commands.add_parser(
        "compare",
        help="compare saved results side by side",
        description="Print the figures of several results files side by side with their differences from the "
        "first (the baseline), and optionally render them as one HTML report.",
    )
    compare.add_argument(
        "results", type=Path, nargs="+", help="results files (.json, .yaml); the first is the baseline"
    )
    compare.add_argument("-o", "--output", type=Path, help="also write the comparison as an HTML file")
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return seconds


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
    return part in UNION_TAGS


class _StopOnSignal:
    """First SIGINT or SIGTERM: stop cleanly and keep the results so far. A second SIGINT: stop now."""

    def __init__(self, runner: BenchmarkRunner) -> None:
        self.runner = runner
        self.received: int | None = None
        # Set by every signal: ends the metrics linger early, when the pod or the user wants the process gone.
        self.any_signal = threading.Event()

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._handle)
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.any_signal.set()
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
    # Before anything slow: a SIGTERM that arrives while the metrics server or the engine starts must still
    # stop the run cleanly instead of killing the process.
    stopper = _StopOnSignal(runner)
    stopper.install()
    metrics_server: MetricsServer | None = None
    metrics_port: int | None = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        exporter = MetricsObserver(config, runner.run_id)
        observers.append(exporter)  # the runner fans out to this very list
        address = getattr(args, "metrics_address", "127.0.0.1")
        try:
            metrics_server = MetricsServer(exporter.registry, metrics_port, address)
        except OSError as error:
            console.print(
                f"[bold red]batchmark run: error:[/] --metrics-port: cannot listen on {address}:{metrics_port}: "
                f"{error.strerror or error}",
                highlight=False,
            )
            return EXIT_USAGE
        console.print(f"serving metrics on {metrics_server.url}", highlight=False)
    report: RunReport | None = None
    stop_now = False
    try:
        try:
            runner.check()
            if leftovers := leftover_engines_warning(engine_processes()):
                console.print(f"[bold yellow]batchmark run: warning:[/] {escape(leftovers)}", highlight=False)
            runner.start()
            report = runner.run()
            for output in config.outputs:
                write_report(report, Path(output))
        except (EngineUnavailable, RequestFormatError) as error:
            console.print(f"[bold red]batchmark run: error:[/] {error}", highlight=False)
            return EXIT_USAGE
        except WorkerFailed as error:
            console.print(f"[bold red]batchmark run: the engine failed:[/] {error}", highlight=False)
            return EXIT_FAILED
        finally:
            runner.close()
        # Off a terminal rich assumes 80 columns and truncates the tables' cells; files and pipes get room.
        summary_console = Console()
        if not summary_console.is_terminal and "COLUMNS" not in os.environ:
            summary_console = Console(width=140)
        print_summary(summary_console, report)
        for output in config.outputs:
            console.print(f"wrote {output}")
        if stopper.received is not None:
            return 128 + stopper.received
        return 0
    except KeyboardInterrupt:
        stop_now = True  # a second Ctrl-C: no push and no linger, just the sockets closed
        raise
    finally:
        # On success and failure alike: a failed run's push records the failure (and keeps the last good
        # results), and the linger lets Prometheus scrape the final phase and counts.
        gateway: str | None = getattr(args, "pushgateway", None)
        if gateway and not stop_now:
            _push(console, gateway, config.name, report)
        if metrics_server is not None:
            if not stop_now:
                _linger(console, stopper, getattr(args, "metrics_linger", DEFAULT_LINGER_SECONDS))
            metrics_server.close()


def _push(console: Console, gateway: str, name: str, report: RunReport | None) -> None:
    outcome = push_results(gateway, name, report)
    if outcome.ok:
        what = "results" if run_succeeded(report) else "the failure (the last good results are kept)"
        console.print(f"pushed {what} to {gateway}", highlight=False)
    else:
        console.print(
            f"[bold yellow]batchmark run: warning:[/] could not push to the Pushgateway {gateway} after "
            f"{outcome.attempts} attempts ({outcome.error}); the results themselves are unaffected",
            highlight=False,
        )


def _linger(console: Console, stopper: _StopOnSignal, seconds: float) -> None:
    if seconds <= 0:
        return
    console.print(f"serving the final metrics for {seconds:g} s more", highlight=False)
    stopper.any_signal.clear()
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C during the linger just ends it
        stopper.any_signal.wait(seconds)


def report_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        report = _load(args.results)
        _write_html(args.output, render_report(report))
    except UsageError as error:
        console.print(f"[bold red]batchmark report: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    console.print(f"wrote {args.output}", highlight=False)
    return 0


def compare_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        if len(args.results) < 2:
            raise UsageError("give at least two results files to compare")
        reports = list(zip(_labels(args.results), [_load(path) for path in args.results], strict=True))
        print_comparison(Console(), reports)
        if args.output is not None:
            _write_html(args.output, render(reports))
    except UsageError as error:
        console.print(f"[bold red]batchmark compare: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    if args.output is not None:
        console.print(f"wrote {args.output}", highlight=False)
    return 0


def _labels(paths: Sequence[Path]) -> list[str]:
    """File names without extension, numbered where two would read the same."""
    stems = [path.stem for path in paths]
    return [f"{stem} ({index + 1})" if stems.count(stem) > 1 else stem for index, stem in enumerate(stems)]


def _load(path: Path) -> RunReport:
    try:
        return load_report(path)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        raise UsageError(
            f"{path} is not a batchmark results file ({error.error_count()} problems; first: "
            f"{'.'.join(map(str, first['loc'])) or '(document)'}: {first['msg']})"
        ) from None
    except ValueError as error:  # JSON and YAML syntax errors both derive from it
        raise UsageError(f"{path} is not valid JSON or YAML: {error}") from None


def _write_html(path: Path, text: str) -> None:
    try:
        write_html(path, text)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run_command(args)
    if args.command == "report":
        return report_command(args)
    if args.command == "compare":
        return compare_command(args)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
