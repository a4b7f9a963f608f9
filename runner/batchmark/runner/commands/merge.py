"""``batchmark merge``: the results of runs measured apart (engines on several machines or pods, each a run of the
same benchmark) as one fleet's result over the window they all measured."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from batchmark.runner.commands.report import labels, load_results
from batchmark.runner.config.load import UsageError
from batchmark.runner.config.output_paths import output_problem
from batchmark.runner.contract import EXIT_FAILED, EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain, print_summary
from batchmark.runner.results.merge import MergeError, merge_reports
from batchmark.runner.results.outputs import write_reports

OUTPUT_SUFFIXES = (".json", ".yaml", ".yml", ".csv", ".html")


def merge_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        if len(args.results) < 2:
            raise UsageError("give at least two results files to merge")
        for output in args.output:
            if output.suffix.lower() not in OUTPUT_SUFFIXES:
                raise UsageError(
                    f"--output: {output}: the file name must end in .json, .yaml, .csv or .html"
                    " (.br.yaml, .br.json: the llm-d Benchmark Report)"
                )
            problem = output_problem(output, args.results)
            if problem is not None:
                raise UsageError(f"--output: {output}: {problem}")
        runs = list(zip(labels(args.results), [load_results(path) for path in args.results], strict=True))
        merged = merge_reports(runs)
    except (UsageError, MergeError) as error:
        print_error(console, "merge", str(error))
        return EXIT_USAGE
    print_summary(Console(), merged)
    failures = write_reports(merged, [Path(output) for output in args.output])
    for path, reason in failures.items():
        print_error(console, "merge", f"cannot write {path}: {reason}")
    for output in args.output:
        if output not in failures:
            print_plain(console, f"wrote {output}")
    return EXIT_FAILED if failures else 0
