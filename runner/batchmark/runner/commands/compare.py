"""``batchmark compare``: several saved results side by side, optionally as one HTML report."""

from __future__ import annotations

import argparse

from rich.console import Console

from batchmark.runner.commands.report import check_html_output, labels, load_results, write_html
from batchmark.runner.config.load import UsageError
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain
from batchmark.runner.results.htmlreport.render import print_comparison, render
from batchmark.runner.results.repeats import SIGNIFICANCE, TEST, differ
from batchmark.runner.results.report import Estimate, RepeatedBenchmark, RunReport

# The figures compared beyond their intervals; the latency statistics both runs carry are added.
_FIGURES = (
    "output_tokens_per_second",
    "requests_per_second",
    "total_tokens_per_second",
    "goodput_output_tokens_per_second",
    "cost_per_million_output_tokens",
)


def compare_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        if len(args.results) < 2:
            raise UsageError("give at least two results files to compare")
        if args.output is not None:
            check_html_output(args.output, args.results)
        reports = list(zip(labels(args.results), [load_results(path) for path in args.results], strict=True))
        print_comparison(Console(), reports)
        for line in noise_lines(reports):
            print_plain(Console(), line)
        if args.output is not None:
            write_html(args.output, render(reports))
    except UsageError as error:
        print_error(console, "compare", str(error))
        return EXIT_USAGE
    if args.output is not None:
        print_plain(console, f"wrote {args.output}")
    return 0


def differs(first: Estimate, second: Estimate) -> tuple[bool | None, float | None]:
    """Whether two repeated figures differ by the rule the recommendation uses (``repeats.differ``: Welch's t-test
    at 0.05 on their repeats), and the p-value; (None, None) when either has one repeat or no values stored."""
    return differ(first.values, second.values)


def _key(entry: RepeatedBenchmark) -> tuple[str, tuple[tuple[str, str], ...]]:
    return entry.strategy, tuple(sorted((name, str(value)) for name, value in entry.swept.items()))


def _figures(entry: RepeatedBenchmark) -> dict[str, Estimate]:
    figures: dict[str, Estimate] = {name: figure for name in _FIGURES if (figure := getattr(entry, name)) is not None}
    figures.update(entry.latency)
    return figures


def noise_lines(reports: list[tuple[str, RunReport]]) -> list[str]:
    """Each run against the first, benchmark by benchmark and figure by figure: "differs" when Welch's t-test on
    their repeats says so at 0.05 (the recommendation's rule), "within noise" when it does not."""
    (base_label, base), *others = reports
    lines: list[str] = []
    for label, report in others:
        if not base.repeated or not report.repeated:
            lines.append(f"{label} against {base_label}: no intervals to compare (run both with --repeats 2 or more)")
            continue
        theirs = {_key(entry): entry for entry in report.repeated}
        for entry in base.repeated:
            other = theirs.get(_key(entry))
            if other is None:
                continue
            point = ", ".join(f"{name}={value}" for name, value in entry.swept.items())
            name = f"{entry.strategy} ({point})" if point else entry.strategy
            mine, their_figures = _figures(entry), _figures(other)
            for figure in (figure for figure in mine if figure in their_figures):
                a, b = mine[figure], their_figures[figure]
                verdict, p_value = differs(a, b)
                change = f"{b.mean / a.mean - 1:+.1%}" if a.mean else "n/a"
                said = (
                    "no test (one repeat, or no repeat values in an older result)"
                    if verdict is None
                    else f"differs ({change}, {TEST} p={p_value:.3g} < {SIGNIFICANCE})"
                    if verdict
                    else f"within noise ({TEST} p={p_value:.3g} >= {SIGNIFICANCE})"
                )
                lines.append(f"{label} against {base_label}, {name}, {figure}: {_shown(b)} against {_shown(a)}: {said}")
    return lines


def _shown(figure: Estimate) -> str:
    if figure.low is None or figure.high is None:
        return f"{figure.mean:.4g}"
    return f"{figure.mean:.4g} [{figure.low:.4g}, {figure.high:.4g}]"
