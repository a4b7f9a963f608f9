"""How results read to people, alike on the console and in the HTML report: numbers with thousands separators
and fixed decimals (never scientific notation), the order a sweep's points were asked for, what the run set."""

from __future__ import annotations

from batchmark.runner.results.report import BenchmarkResult, Estimate, RepeatedBenchmark, RunReport


def fixed(value: float | None, places: int) -> str:
    """``value`` with thousands separators and ``places`` decimals; "-" for no value."""
    return "-" if value is None else f"{value:,.{places}f}"


def milliseconds(seconds: float | None, places: int = 3) -> str:
    """Seconds shown in milliseconds: the harness's overheads are fractions of a millisecond."""
    return fixed(None if seconds is None else seconds * 1000, places)


def interval(figure: Estimate | None, places: int, scale: float = 1.0) -> str:
    """mean [low, high] of a figure over repeats, its 95% interval written whole because it is not symmetric (on
    the log scale); the mean alone where there is no interval."""
    if figure is None:
        return "-"
    if figure.low is None or figure.high is None:
        return fixed(figure.mean * scale, places)
    low, high = fixed(figure.low * scale, places), fixed(figure.high * scale, places)
    return f"{fixed(figure.mean * scale, places)} [{low}, {high}]"


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def swept_order(report: RunReport) -> list[int]:
    """Indices of the benchmarks in the order the sweep's points were given (a point's strategies in their run
    order, then its repeats), not the order they ran in: repeats run their points shuffled."""
    strategies: dict[str, int] = {}
    for result in report.benchmarks:
        strategies.setdefault(result.strategy, len(strategies))
    return sorted(
        range(len(report.benchmarks)),
        key=lambda index: _position(report.benchmarks[index], strategies),
    )


def repeated_in_swept_order(report: RunReport) -> list[tuple[int, RepeatedBenchmark]]:
    """(index in repeated, entry) in the order the sweep's points were given."""
    strategies: dict[str, int] = {}
    for result in report.benchmarks:
        strategies.setdefault(result.strategy, len(strategies))
    entries = list(enumerate(report.repeated or []))
    return sorted(entries, key=lambda pair: (pair[1].point, strategies.get(pair[1].strategy, 0)))


def _position(result: BenchmarkResult, strategies: dict[str, int]) -> tuple[int, int, int]:
    return result.point, strategies[result.strategy], result.repeat


def repeat_label(report: RunReport, result: BenchmarkResult) -> str:
    """ "repeat 2/3" for a run with repeats; "" without."""
    return f"repeat {result.repeat + 1}/{report.repeats}" if report.repeats > 1 else ""


def run_setting(report: RunReport) -> str:
    """What the run varied, for a header: the swept fields with their values in the order given (or the one
    batch size), and the repeats."""
    if report.sweep is not None and report.benchmarks:
        ordered = [report.benchmarks[index] for index in swept_order(report)]
        fields = []
        for name in report.sweep.fields:
            values = dict.fromkeys(str(benchmark.swept.get(name)) for benchmark in ordered)
            fields.append(f"{name.removeprefix('vllm_config.')} {', '.join(values)}")
        setting = f"sweep of {report.sweep.points} points over " + "; ".join(fields)
    else:
        setting = f"batch size {report.config.get('backend', {}).get('batch_size', '?')}"
    return f"{setting}, {report.repeats} repeats each" if report.repeats > 1 else setting


def money(value: float | None) -> str:
    """A price per million tokens: four decimals, as a small model's can be a fraction of a cent."""
    return fixed(value, 4)
