"""``batchmark compare``: several results side by side (files, or runs kept in a results store: by id or picked by
history's filters), optionally as one HTML report; with ``--baseline``, a regression verdict whose exit code a CI
pipeline can gate on."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from batchmark.runner.commands.history import Selection, selection
from batchmark.runner.commands.report import check_html_output, load_results, write_html
from batchmark.runner.config.load import UsageError
from batchmark.runner.contract import EXIT_REGRESSED, EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain, print_warning
from batchmark.runner.results.fingerprint import fingerprint, workload_differences
from batchmark.runner.results.htmlreport.render import print_comparison, render
from batchmark.runner.results.regression import DEFAULT_THRESHOLD, describe, regression
from batchmark.runner.results.repeats import SIGNIFICANCE, TEST, differ
from batchmark.runner.results.report import Estimate, RepeatedBenchmark, RunReport, Verdict
from batchmark.runner.store.baseline import LAST, BaselineError, baseline_run, stored_run
from batchmark.runner.store.results_store import ResultsStore, StoreError, indexed_once, open_store

# The figures compared beyond their intervals; the latency statistics both runs carry are added.
_FIGURES = (
    "output_tokens_per_second",
    "requests_per_second",
    "total_tokens_per_second",
    "goodput_output_tokens_per_second",
    "cost_per_million_output_tokens",
)
# Differences listed in one refusal; the rest are counted.
_SHOWN_DIFFERENCES = 4


def compare_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        threshold = _threshold(args.threshold)
        store = _store(args.store)
        chosen = selection(args)
        if chosen.options and store is None:
            raise UsageError(f"{chosen.options[0]}: picks stored runs: give --store")
        if args.output is not None:
            check_html_output(args.output, [Path(reference) for reference in args.results])
        resolved = [_resolve(store, reference) for reference in args.results]
        if chosen.options and store is not None:
            resolved += _picked(store, chosen, {label for label, _ in resolved})
        if args.baseline is None and len(resolved) < 2:
            raise UsageError("give at least two results to compare (or one with --baseline)")
        candidates = list(
            zip(_numbered([label for label, _ in resolved]), [report for _, report in resolved], strict=True)
        )
        reports = candidates
        if args.baseline is not None:
            reports = [_baseline(store, args.baseline, candidates[0][1]), *candidates]
            _check_comparable(reports)
        else:
            for line in _incomparable_lines(reports):
                print_warning(console, "compare", line)
        print_comparison(Console(), reports)
        for line in noise_lines(reports):
            print_plain(Console(), line)
        code = _verdicts(reports, threshold) if args.baseline is not None else 0
        if args.output is not None:
            write_html(args.output, render(reports))
    except UsageError as error:
        print_error(console, "compare", str(error))
        return EXIT_USAGE
    except StoreError as error:
        print_error(console, "compare", f"--store: {error}")
        return EXIT_USAGE
    if args.output is not None:
        print_plain(console, f"wrote {args.output}")
    return code


def _threshold(text: str | None) -> float:
    if text is None:
        return DEFAULT_THRESHOLD
    try:
        percent = float(text.removesuffix("%"))
    except ValueError:
        percent = -1.0
    if not 0 <= percent < 100:
        raise UsageError(f"--threshold: {text!r} is not a percentage from 0 to below 100 (e.g. 5 or 5%)")
    return percent / 100


def _store(text: str | None) -> ResultsStore | None:
    if text is None:
        return None
    try:
        return indexed_once(open_store(text))
    except ValueError as error:
        raise UsageError(f"--store: {error}") from None


def _resolve(store: ResultsStore | None, reference: str) -> tuple[str, RunReport]:
    """A results file, or with --store a stored run by its id (or the id's unique start); with its label."""
    path = Path(reference)
    if store is None or path.exists():
        return path.stem, load_results(path)
    try:
        run = stored_run(store, reference, "results")
    except BaselineError as error:
        raise UsageError(f"{error}; nor is it a file") from None
    return run.run_id, store.report(run)


def _picked(store: ResultsStore, chosen: Selection, named: set[str]) -> list[tuple[str, RunReport]]:
    """The stored runs the filters pick, oldest first, after those named by id; with their labels."""
    runs = [run for run in chosen.picked(store.index().runs) if run.run_id not in named]
    if not runs and not named:
        raise UsageError(f"{' '.join(chosen.options)}: no stored run matches in {store.name}")
    return [(run.run_id, store.report(run)) for run in runs]


def _numbered(names: list[str]) -> list[str]:
    """Numbered where two would read the same (one file given twice)."""
    return [f"{name} ({index + 1})" if names.count(name) > 1 else name for index, name in enumerate(names)]


def _baseline(store: ResultsStore | None, reference: str, candidate: RunReport) -> tuple[str, RunReport]:
    """The baseline: a file, a stored run, or ``last``, the latest complete stored run of the candidate's workload
    that started before it."""
    path = Path(reference)
    if reference != LAST and (store is None or path.exists()):
        return f"{path.stem} (baseline)", load_results(path)
    if store is None:
        raise UsageError("--baseline: last is the last run of the same workload in a store: give --store")
    try:
        run = baseline_run(store, reference, candidate, "--baseline")
    except BaselineError as error:
        raise UsageError(str(error) if reference != LAST else f"--baseline: {error}") from None
    return f"{run.run_id} (baseline)", store.report(run)


def _check_comparable(reports: list[tuple[str, RunReport]]) -> None:
    (base_label, base), *candidates = reports
    for label, report in candidates:
        differences = workload_differences(fingerprint(base), fingerprint(report))
        if differences:
            raise UsageError(f"--baseline: {label} is not comparable with {base_label}: {_listed(differences)}")
        if not base.repeated or not report.repeated:
            raise UsageError(
                f"--baseline: a regression verdict needs repeats; {label if not report.repeated else base_label} has"
                " none: run both with --repeats 3 or more"
            )


def _incomparable_lines(reports: list[tuple[str, RunReport]]) -> list[str]:
    (base_label, base), *others = reports
    lines = []
    for label, report in others:
        differences = workload_differences(fingerprint(base), fingerprint(report))
        if differences:
            lines.append(f"{label} is not the same workload as {base_label}: {_listed(differences)}")
    return lines


def _listed(differences: list[str]) -> str:
    shown = "; ".join(differences[:_SHOWN_DIFFERENCES])
    more = len(differences) - _SHOWN_DIFFERENCES
    return f"{shown}; and {more} more" if more > 0 else shown


def _verdicts(reports: list[tuple[str, RunReport]], threshold: float) -> int:
    """Each candidate's regression verdict against the baseline; EXIT_REGRESSED when any regressed."""
    (base_label, base), *candidates = reports
    code = 0
    out = Console()
    for label, report in candidates:
        verdict = regression(base, report, threshold)
        for entry in verdict.benchmarks:
            print_plain(out, f"{label} against {base_label}, {describe(entry)}")
        print_plain(out, f"{label} against {base_label}: regressed {verdict.verdict.value}: {verdict.reason}")
        if verdict.verdict is Verdict.REGRESSED:
            code = EXIT_REGRESSED
    return code


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
