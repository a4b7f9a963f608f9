"""``batchmark``: the command line. Bad input exits 2 with one clear message and writes nothing."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_snake
from rich.console import Console

from batchmark.runner import __version__, contract
from batchmark.runner.arguments import port_number
from batchmark.runner.backend.process_group import engine_processes, leftover_engines_warning
from batchmark.runner.backend.worker import mp_context_name
from batchmark.runner.benchmark import BenchmarkRunner
from batchmark.runner.config import MAX_SWEEP_BENCHMARKS, MAX_SWEEP_FIELDS, UNION_TAGS, RunConfig
from batchmark.runner.console import ConsoleObserver, print_error, print_plain, print_summary, print_warning
from batchmark.runner.engines.engine_args import EngineArgumentError
from batchmark.runner.engines.factory import EngineUnavailable
from batchmark.runner.engines.request_format import RequestFormatError
from batchmark.runner.events import RunObserver
from batchmark.runner.htmlreport.render import print_comparison, render, render_report
from batchmark.runner.metrics import DEFAULT_LINGER_SECONDS, MetricsObserver, MetricsServer
from batchmark.runner.outputs import load_report, output_problem, write_atomically, write_reports
from batchmark.runner.pushgateway import PushOutcome, push_results, run_succeeded
from batchmark.runner.results import RunReport
from batchmark.runner.shutdown import Shutdown
from batchmark.runner.spec import SpecError, parse_spec, parse_sweep
from batchmark.runner.statuswriter import StatusWriter

# Exit codes (README, "Exit codes"): 0 the run ended as configured and every output was written; 1 an
# unexpected error; 2 bad input, found before any work; 3 the engine failed to load or its process died
# mid-run (the results so far are written, marked incomplete with the reason); 4 an output could not be
# written (the others were); 128 + N stopped by signal N (130 Ctrl-C, 143 SIGTERM; results written, marked
# incomplete).
EXIT_FAILED = contract.EXIT_FAILED
EXIT_USAGE = contract.EXIT_USAGE
EXIT_ENGINE_FAILED = contract.EXIT_ENGINE_FAILED
EXIT_OUTPUT_FAILED = contract.EXIT_OUTPUT_FAILED
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
    run.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="FIELD=V1,V2,...",
        help="run the whole profile once per value of a backend field, e.g. batch_size=8,16,32,64,128 (also "
        "batch_timeout, dispatch: one engine load for all; request_format, vllm_config.NAME: the engine reloads "
        f"between values, load time untimed). Repeat for a second field: a grid (at most {MAX_SWEEP_FIELDS} "
        f"fields). At most {MAX_SWEEP_BENCHMARKS} benchmarks in all: sweep points times the profile's benchmarks "
        "(sweep_size for kind=sweep); more is refused",
    )
    run.add_argument(
        "--sweep-warmup",
        type=int,
        metavar="REQUESTS",
        help="requests run through the engine before each sweep point, outside every result (default 0)",
    )
    run.add_argument(
        "--slo",
        metavar="TARGETS",
        help="latency budget, e.g. request_latency_p99=2.0,ttft_p95=0.5 (seconds; DISTRIBUTION_STATISTIC with "
        "request_latency, queue_wait, batch_wait, ttft, tpot and mean, median, p90, p95, p99, p999, max): each "
        "benchmark reports pass/fail and goodput, and the summary recommends the fastest that passed",
    )
    run.add_argument(
        "--gpu-cost-per-hour",
        type=float,
        metavar="PRICE",
        help="price of one GPU-hour: every benchmark reports cost per million output and total tokens",
    )
    run.add_argument(
        "--gpus",
        type=int,
        metavar="COUNT",
        help="GPUs the engine occupies, for the cost (default: tensor_parallel_size x pipeline_parallel_size)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar or banner; the summary only")
    run.add_argument(
        "--metrics-port",
        type=port_number,
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
        type=_http_url,
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
    # Commands of other parts (the operator's crd, manifest, ...), registered by entry point: they set `handler`.
    for entry_point in importlib.metadata.entry_points(group="batchmark.commands"):
        entry_point.load()(commands)
    return parser


MAX_LINGER_SECONDS = 3600.0  # an hour: far beyond any scrape interval


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= MAX_LINGER_SECONDS:  # also rejects NaN and infinity
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_LINGER_SECONDS:g} seconds, got {text}")
    return seconds


def _http_url(text: str) -> str:
    """An http(s) URL with a host: an empty or misspelt value must not silently turn pushing off."""
    try:
        parsed = urllib.parse.urlsplit(text)
        parsed.port  # noqa: B018 - reading it validates it
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host, got {text!r}")
    return text


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
    for text in getattr(args, "sweep", None) or []:
        try:
            override = parse_sweep(text)
        except SpecError as error:
            raise UsageError(f"--sweep: {error}") from None
        merged["sweep"] = _merge_spec(merged.get("sweep"), _normalised(override, "--sweep"))
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
    inputs = [args.config] if args.config else []
    for output in config.outputs:
        problem = output_problem(Path(output), inputs)
        if problem is not None:
            raise UsageError(f"--output: {output}: {problem}")
    try:
        mp_context_name()
    except ValueError as error:
        raise UsageError(str(error)) from None
    return config


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
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--config: cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"--config: {path} is not UTF-8 text (byte {error.start})") from None
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    try:
        data = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UsageError(f"--config: {path} is not valid {kind}: {error}") from None
    except RecursionError:
        raise UsageError(f"--config: {path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path} must hold a mapping with backend, data, profile and constraints")
    return data


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


def run_command(
    args: argparse.Namespace, extra_observers: Sequence[RunObserver] = (), shutdown: Shutdown | None = None
) -> int:
    console = Console(stderr=True, quiet=False)
    shutdown = shutdown or Shutdown.install()
    try:
        config = load_config(args)
    except UsageError as error:
        print_error(console, "run", str(error))
        return EXIT_USAGE
    observers: list[RunObserver] = [ConsoleObserver(console, show_progress=not args.quiet), *extra_observers]
    runner = BenchmarkRunner(config, observers, stop=shutdown.stop)
    try:
        runner.check()
    except EngineArgumentError as error:
        print_error(console, "run", f"--backend: {error}")
        return EXIT_USAGE
    except (EngineUnavailable, RequestFormatError) as error:
        print_error(console, "run", str(error))
        return EXIT_USAGE
    metrics_server: MetricsServer | None = None
    metrics_port: int | None = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        exporter = MetricsObserver(config, runner.run_id)
        observers.append(exporter)  # the runner fans out to this very list
        address = getattr(args, "metrics_address", "127.0.0.1")
        try:
            metrics_server = MetricsServer(exporter.registry, metrics_port, address)
        except OSError as error:
            print_error(
                console, "run", f"--metrics-port: cannot listen on {address}:{metrics_port}: {error.strerror or error}"
            )
            return EXIT_USAGE
        print_plain(console, f"serving metrics on {metrics_server.url}")
    report: RunReport | None = None
    code = EXIT_FAILED
    if leftovers := leftover_engines_warning(engine_processes()):
        print_warning(console, "run", leftovers)
    try:
        try:
            runner.start()
            report = runner.run()
        finally:
            runner.close(grace=shutdown.engine_grace() if shutdown.stop.is_set() else None, hurry=shutdown.hurry)
        code = _finish(console, config, runner, report)
    finally:
        # On success and failure alike: a failed run's push records the failure (and keeps the last good
        # results), and the linger lets Prometheus scrape the final phase and counts.
        gateway: str | None = getattr(args, "pushgateway", None)
        if gateway and not shutdown.hurry.is_set():
            _push(console, shutdown, gateway, config.name, report)
        if metrics_server is not None:
            _linger(console, shutdown, getattr(args, "metrics_linger", DEFAULT_LINGER_SECONDS))
            metrics_server.close()
    # A signal at any moment, even after the results were written, means the process did not do all it was
    # asked (a push or the linger may have been cut short).
    return shutdown.exit_code or code


def _finish(console: Console, config: RunConfig, runner: BenchmarkRunner, report: RunReport) -> int:
    """Write every output, print the summary; the exit code for what happened."""
    failed_outputs = write_reports(report, [Path(output) for output in config.outputs])
    # Off a terminal rich assumes 80 columns and truncates the tables' cells; files and pipes get room.
    summary_console = Console()
    if not summary_console.is_terminal and "COLUMNS" not in os.environ:
        summary_console = Console(width=140)
    print_summary(summary_console, report)
    for output in config.outputs:
        if Path(output) in failed_outputs:
            print_error(console, "run", f"could not write {output}: {failed_outputs[Path(output)]}")
        else:
            print_plain(console, f"wrote {output}")
    if runner.failure is not None:
        print_error(console, "run", runner.failure, label="the engine failed")
        return EXIT_ENGINE_FAILED
    return EXIT_OUTPUT_FAILED if failed_outputs else 0


def _push(console: Console, shutdown: Shutdown, gateway: str, name: str, report: RunReport | None) -> None:
    """Push from a thread, so that a signal ends the wait. A signal during the push abandons it at once; after a
    signal that came earlier, one attempt is made, abandoned at the shutdown deadline."""
    outcome: list[PushOutcome] = []

    def push() -> None:
        outcome.append(push_results(gateway, name, report, give_up=shutdown.stop.is_set, sleep=shutdown.stop.wait))

    received = shutdown.received
    pusher = threading.Thread(target=push, name="batchmark-push", daemon=True)
    pusher.start()
    while pusher.is_alive():
        left = shutdown.seconds_left()
        if shutdown.received != received or (left is not None and left <= 0):
            print_warning(console, "run", f"gave up pushing to the Pushgateway {gateway}: the process is stopping")
            return
        pusher.join(timeout=0.05)
    if not outcome:
        return
    result = outcome[0]
    if result.ok:
        what = "results" if run_succeeded(report) else "the failure (the last good results are kept)"
        print_plain(console, f"pushed {what} to {gateway}")
    else:
        print_warning(
            console,
            "run",
            f"could not push to the Pushgateway {gateway} after {result.attempts} attempts ({result.error}); "
            "the results themselves are unaffected",
        )


def _linger(console: Console, shutdown: Shutdown, seconds: float) -> None:
    """Serve the final values a while longer: a signal during the linger ends it, and after an earlier signal it
    never outlasts the shutdown deadline."""
    left = shutdown.seconds_left()
    if left is not None:
        seconds = min(seconds, left)
    if seconds <= 0:
        return
    print_plain(console, f"serving the final metrics for {seconds:g} s more")
    received = shutdown.received
    deadline = time.monotonic() + seconds
    while shutdown.received == received and time.monotonic() < deadline:
        time.sleep(0.05)


def report_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        _check_html_output(args.output, [args.results])
        report = _load(args.results)
        _write_html(args.output, render_report(report))
    except UsageError as error:
        print_error(console, "report", str(error))
        return EXIT_USAGE
    print_plain(console, f"wrote {args.output}")
    return 0


def compare_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        if len(args.results) < 2:
            raise UsageError("give at least two results files to compare")
        if args.output is not None:
            _check_html_output(args.output, args.results)
        reports = list(zip(_labels(args.results), [_load(path) for path in args.results], strict=True))
        print_comparison(Console(), reports)
        if args.output is not None:
            _write_html(args.output, render(reports))
    except UsageError as error:
        print_error(console, "compare", str(error))
        return EXIT_USAGE
    if args.output is not None:
        print_plain(console, f"wrote {args.output}")
    return 0


def _check_html_output(path: Path, inputs: Sequence[Path]) -> None:
    """Before reading anything: an output that can only be HTML, never one of the inputs."""
    problem = output_problem(path, inputs)
    if problem is not None:
        raise UsageError(f"--output: {path}: {problem}")
    if path.suffix.lower() != ".html":
        raise UsageError(f"--output: {path}: the report is HTML; the file name must end in .html")


def _labels(paths: Sequence[Path]) -> list[str]:
    """File names without extension, numbered where two would read the same."""
    stems = [path.stem for path in paths]
    return [f"{stem} ({index + 1})" if stems.count(stem) > 1 else stem for index, stem in enumerate(stems)]


def _load(path: Path) -> RunReport:
    try:
        return load_report(path)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"{path} is not UTF-8 text (byte {error.start})") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be a batchmark results file") from None
    except ValidationError as error:
        first = error.errors()[0]
        raise UsageError(
            f"{path} is not a batchmark results file ({error.error_count()} problems; first: "
            f"{'.'.join(map(str, first['loc'])) or '(document)'}: {first['msg']})"
        ) from None
    except (ValueError, yaml.YAMLError) as error:  # JSON's syntax errors are ValueErrors, YAML's are not
        raise UsageError(f"{path} is not valid JSON or YAML: {error}") from None


def _write_html(path: Path, text: str) -> None:
    try:
        write_atomically(path, text)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def main(argv: Sequence[str] | None = None, shutdown: Shutdown | None = None) -> int:
    """The command line; ``batchmark`` (``__main__``) installs the signal handlers before importing this module and
    passes them in, an in-process caller gets them installed for the call."""
    installed_here = shutdown is None
    shutdown = shutdown or Shutdown.install()
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            # Inside a BatchBenchmark's pod its environment switches the status writer on; elsewhere it is None.
            status_writer = StatusWriter.from_environment()
            return run_command(args, [status_writer] if status_writer is not None else [], shutdown=shutdown)
        if args.command == "report":
            code = report_command(args)
        elif args.command == "compare":
            code = compare_command(args)
        elif (handler := getattr(args, "handler", None)) is not None:
            code = handler(args)
        else:
            return EXIT_USAGE
        # These finish in moments: a signal meanwhile is reported once they are done.
        return shutdown.exit_code or code
    finally:
        if installed_here:
            shutdown.restore()


if __name__ == "__main__":
    sys.exit(main())
