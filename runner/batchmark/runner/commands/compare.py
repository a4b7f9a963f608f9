"""``batchmark compare``: several saved results side by side, optionally as one HTML report."""

from __future__ import annotations

import argparse

from rich.console import Console

from batchmark.runner.commands.report import check_html_output, labels, load_results, write_html
from batchmark.runner.configload import UsageError
from batchmark.runner.console import print_error, print_plain
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.htmlreport.render import print_comparison, render


def compare_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        if len(args.results) < 2:
            raise UsageError("give at least two results files to compare")
        if args.output is not None:
            check_html_output(args.output, args.results)
        reports = list(zip(labels(args.results), [load_results(path) for path in args.results], strict=True))
        print_comparison(Console(), reports)
        if args.output is not None:
            write_html(args.output, render(reports))
    except UsageError as error:
        print_error(console, "compare", str(error))
        return EXIT_USAGE
    if args.output is not None:
        print_plain(console, f"wrote {args.output}")
    return 0
