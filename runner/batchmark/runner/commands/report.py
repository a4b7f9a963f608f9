"""``batchmark report``: a saved result rendered as one self-contained HTML file; the helpers ``compare`` shares."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console

from batchmark.runner.config.load import UsageError
from batchmark.runner.config.output_paths import output_problem
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain
from batchmark.runner.results.htmlreport.render import render_report
from batchmark.runner.results.outputs import load_report, write_atomically
from batchmark.runner.results.report import RunReport


def report_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        check_html_output(args.output, [args.results])
        report = load_results(args.results)
        write_html(args.output, render_report(report))
    except UsageError as error:
        print_error(console, "report", str(error))
        return EXIT_USAGE
    print_plain(console, f"wrote {args.output}")
    return 0


def check_html_output(path: Path, inputs: Sequence[Path]) -> None:
    """Before reading anything: an output that can only be HTML, never one of the inputs."""
    problem = output_problem(path, inputs)
    if problem is not None:
        raise UsageError(f"--output: {path}: {problem}")
    if path.suffix.lower() != ".html":
        raise UsageError(f"--output: {path}: the report is HTML; the file name must end in .html")


def labels(paths: Sequence[Path]) -> list[str]:
    """File names without extension, numbered where two would read the same."""
    stems = [path.stem for path in paths]
    return [f"{stem} ({index + 1})" if stems.count(stem) > 1 else stem for index, stem in enumerate(stems)]


def load_results(path: Path) -> RunReport:
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


def write_html(path: Path, text: str) -> None:
    try:
        write_atomically(path, text)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
