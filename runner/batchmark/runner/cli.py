"""``batchmark``: the command line. It parses the arguments and hands each command to its module
(batchmark.runner.commands; the operator's commands by entry point). Bad input exits 2 with one clear message and
writes nothing."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from pathlib import Path

from batchmark.runner import __version__
from batchmark.runner.config.arguments import (
    DEFAULT_LINGER_SECONDS,
    HISTORY_FORMATS,
    http_url,
    linger_seconds,
    port_number,
)
from batchmark.runner.config.base import MAX_REPEATS, MAX_SWEEP_BENCHMARKS
from batchmark.runner.config.sweep import MAX_SWEEP_FIELDS
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.lifecycle.shutdown import Shutdown


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
        help="write results to PATH (.json, .yaml, .csv, or .html: a self-contained report; .br.yaml or .br.json: "
        "the llm-d Benchmark Report v0.2; repeatable)",
    )
    run.add_argument("--sample-requests", type=int, help="per-request records kept in the results")
    run.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help=f"measure every benchmark (every sweep point) N times on the one engine load, in rounds of shuffled "
        f"order, and report each figure as mean with a 95%% confidence interval (1 to {MAX_REPEATS}, default 1)",
    )
    run.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="FIELD=V1,V2,...",
        help="run the whole profile once per value of a backend field, e.g. batch_size=8,16,32,64,128, or "
        "batch_size=auto[:LOW-HIGH] to search the batch size with the highest throughput within the budget (also "
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
    run.add_argument(
        "--store",
        metavar="STORE",
        help="keep the run in this results store beyond the run (a folder, a file:// URL, or s3://BUCKET[/PREFIX] "
        "with the endpoint and credentials in AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): its "
        "results, HTML report, config and fingerprint under runs/MODEL/HARDWARE/DATE/, listed by `batchmark history`",
    )
    run.add_argument(
        "--baseline",
        metavar="RUN",
        help="judge the run against this run in --store (its id, or `last`: the latest earlier run of the same "
        "workload): regressed when its output tokens/s fell significantly (Welch's t-test on the repeats) and by "
        "more than 5%%; the verdict is printed and kept in the results",
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
        type=linger_seconds,
        metavar="SECONDS",
        help="keep serving metrics this long after the run, so the last values are scraped (default: "
        f"{DEFAULT_LINGER_SECONDS:g}, one default scrape interval; a signal ends it early)",
    )
    run.add_argument(
        "--pushgateway",
        type=http_url,
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
        description="Print the figures of several results side by side with their differences from the first (the "
        "baseline), and optionally render them as one HTML report; with --baseline, whether each regressed.",
    )
    compare.add_argument(
        "results",
        nargs="*",
        help="results files (.json, .yaml) or, with --store, stored runs' ids, then the stored runs the filters"
        " below pick (oldest first); the first is the baseline unless --baseline gives one",
    )
    compare.add_argument("-o", "--output", type=Path, help="also write the comparison as an HTML file")
    compare.add_argument(
        "--store", metavar="STORE", help="the results store the run ids are looked up in (a folder or s3://...)"
    )
    compare.add_argument(
        "--baseline",
        metavar="RUN",
        help="judge each result against this one (a file, a stored run's id, or `last`: the latest earlier run of "
        "the same workload in --store): exit 6 when one regressed (its output tokens/s fell significantly, by "
        "Welch's t-test on the repeats, and by more than --threshold); refused for runs of different workloads "
        "or without repeats",
    )
    compare.add_argument(
        "--threshold",
        metavar="PERCENT",
        help="the smallest drop in output tokens/s called a regression (default 5)",
    )
    add_selection_arguments(compare)
    merge = commands.add_parser(
        "merge",
        help="merge the results of runs measured apart into one fleet's result",
        description="Merge results files of the same benchmark run on several machines or pods at once (each"
        " engine, or each set of engine replicas, a run) into one result: throughput summed over the window every"
        " run measured, distributions merged from their sketches, each run's engines listed as replicas with the"
        " straggler ratio and how far apart the runs began.",
    )
    merge.add_argument("results", type=Path, nargs="+", help="results files (.json, .yaml) of one benchmark")
    merge.add_argument(
        "-o",
        "--output",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="write the merged result to PATH (.json, .yaml, .csv, .html, or .br.yaml/.br.json: llm-d's Benchmark "
        "Report v0.2; repeatable)",
    )
    add_history_parser(commands)
    # Commands of other parts (the operator's crd, manifest, ...), registered by entry point: they set `handler`.
    for entry_point in importlib.metadata.entry_points(group="batchmark.commands"):
        entry_point.load()(commands)
    return parser


def add_history_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    history = commands.add_parser(
        "history",
        help="list the runs kept in a results store",
        description="List the runs a results store keeps (`batchmark run --store`), oldest first, filtered by "
        "model, GPU, engine version, name, fingerprint and time. Filters take shell-style patterns (*, ?, [..]); "
        "all given must match.",
    )
    history.add_argument(
        "--store", required=True, help="the results store: a folder (a path or a file:// URL) or s3://BUCKET/PREFIX"
    )
    add_selection_arguments(history)
    history.add_argument(
        "--format", default="table", help=f"how to print them: {', '.join(HISTORY_FORMATS)} (default table)"
    )
    history.add_argument(
        "--compact",
        action="store_true",
        help="first gather the store's index into one compacted object, so that reading it takes a request or two"
        " (stores compact themselves every 100 runs; this needs the right to write and delete in the store)",
    )
    history.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="write them to PATH instead: .json, .csv, or .html (a page with output tokens/s over time per model and"
        " hardware, a series per workload, and the runs)",
    )


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters that pick stored runs: history lists them, compare compares them."""
    parser.add_argument("--model", metavar="PATTERN", help="the model, e.g. 'Qwen/*'")
    parser.add_argument("--gpu", metavar="PATTERN", help="the device name, e.g. '*H100*'")
    parser.add_argument("--engine-version", metavar="PATTERN", help="vLLM's version, e.g. '0.11.*'")
    parser.add_argument("--name", metavar="PATTERN", help="the benchmark's name")
    parser.add_argument("--fingerprint", metavar="PATTERN", help="the workload's fingerprint key (or its start*)")
    parser.add_argument("--since", metavar="TIME", help="runs started at or after TIME (ISO 8601: 2026-12-01)")
    parser.add_argument("--until", metavar="TIME", help="runs started before TIME (ISO 8601)")
    parser.add_argument("--last", metavar="N", help="only the N most recent runs that match")


def main(argv: Sequence[str] | None = None, shutdown: Shutdown | None = None) -> int:
    """The command line; ``batchmark`` (``__main__``) installs the signal handlers before importing this module and
    passes them in, an in-process caller gets them installed for the call."""
    installed_here = shutdown is None
    shutdown = shutdown or Shutdown.install()
    # Each command's module is imported when that command runs: what the runner's commands import (SciPy, the
    # store, the HTML report: about 60 MB) is memory `batchmark operator`, a command of the same program, must
    # not carry.
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            from batchmark.runner.commands import run  # noqa: PLC0415 - see above
            from batchmark.runner.observe.statuswriter import StatusWriter  # noqa: PLC0415 - see above

            # Inside a BatchBenchmark's pod its environment switches the status writer on; elsewhere it is None.
            status_writer = StatusWriter.from_environment()
            return run.run_command(args, [status_writer] if status_writer is not None else [], shutdown=shutdown)
        if args.command == "report":
            from batchmark.runner.commands import report  # noqa: PLC0415 - see above

            code = report.report_command(args)
        elif args.command == "compare":
            from batchmark.runner.commands import compare  # noqa: PLC0415 - see above

            code = compare.compare_command(args)
        elif args.command == "merge":
            from batchmark.runner.commands import merge  # noqa: PLC0415 - see above

            code = merge.merge_command(args)
        elif args.command == "history":
            from batchmark.runner.commands import history  # noqa: PLC0415 - see above

            code = history.history_command(args)
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
    process_shutdown = Shutdown.install()
    exit_code = main(shutdown=process_shutdown)
    process_shutdown.ignore_from_now_on()
    sys.exit(exit_code)
