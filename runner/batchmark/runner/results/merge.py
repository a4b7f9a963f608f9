"""Runs measured apart, merged into one fleet's result (``batchmark merge``): the engines of several machines or pods,
each a run of the same benchmark, summed over the window they all measured.

Each run's measured window lies on the wall clock (``started_at`` + ``measured_from``); the merged benchmark's window
is the common one, from the last run's start of measurement to the first run's end. What each run completed inside
it comes from its timeline (a bucket that straddles an edge counts by its share of the window), so the sums are
over one window, not over windows that merely overlap. Distributions merge from the runs' sketches (t-digests; count,
mean, min, max and std exactly), never by averaging percentiles. Each run's own engines stay listed as replicas, with
their figures over their own windows.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from batchmark.runner.results.report import (
    BenchmarkResult,
    Distributions,
    ReplicaResult,
    RequestCounts,
    RunReport,
    Throughput,
    TimelinePoint,
)
from batchmark.runner.results.scaling import replicas_summary
from batchmark.runner.results.stats import DistributionSummary, Sketch, merged_summary

MAX_MERGED_TIMELINE = 512


class MergeError(ValueError):
    """The runs cannot be merged; the message names the run and what differs."""


@dataclass(frozen=True)
class _InWindow:
    """One run's amounts inside the common window."""

    completed: float
    errored: float
    output_tokens: float
    prompt_tokens: float
    busy: float


def merge_reports(runs: Sequence[tuple[str, RunReport]]) -> RunReport:
    """One report of the runs (label, report), benchmark by benchmark; MergeError when they are not runs of one
    benchmark or their measured windows share no moment."""
    if len(runs) < 2:
        raise MergeError("give at least two results files to merge")
    _check_alike(runs)
    benchmarks = [
        _merge_benchmark(index, [(label, report, report.benchmarks[index]) for label, report in runs])
        for index in range(len(runs[0][1].benchmarks))
    ]
    first = runs[0][1]
    devices = [
        f"{label}: {device}"
        for label, report in runs
        for device in (report.engine.replica_devices or [report.engine.gpu_name or report.engine.kind])
    ]
    stop_reasons = [f"{label}: {report.stop_reason}" for label, report in runs if report.stop_reason]
    return first.model_copy(
        update={
            "run_id": uuid.uuid4().hex[:12],
            "engine": first.engine.model_copy(update={"replicas": len(devices), "replica_devices": devices}),
            "complete": all(report.complete for _, report in runs),
            "stop_reason": "; ".join(stop_reasons) or None,
            "benchmarks": benchmarks,
            # Decided over one run's benchmarks; the merged figures would need deciding again.
            "recommendation": None,
            "repeated": None,
            "repeats_warning": None,
        }
    )


def _check_alike(runs: Sequence[tuple[str, RunReport]]) -> None:
    seen: dict[str, str] = {}
    for label, report in runs:
        if report.run_id in seen:
            raise MergeError(f"{label} is the same run as {seen[report.run_id]} (run_id {report.run_id})")
        seen[report.run_id] = label
    first_label, first = runs[0]
    for label, report in runs[1:]:
        for what, mine, theirs in (
            ("model", first.engine.model, report.engine.model),
            ("engine", first.engine.kind, report.engine.kind),
            (
                "data",
                first.data.content_hash if first.data else None,
                report.data.content_hash if report.data else None,
            ),
            ("benchmarks", len(first.benchmarks), len(report.benchmarks)),
        ):
            if mine != theirs:
                raise MergeError(f"{label}: its {what} ({theirs}) is not {first_label}'s ({mine}): not one benchmark")
        for index, (ours, other) in enumerate(zip(first.benchmarks, report.benchmarks, strict=True)):
            if (ours.strategy, ours.swept) != (other.strategy, other.swept):
                raise MergeError(
                    f"{label}: benchmark {index + 1} is {_name(other)}, {first_label}'s is {_name(ours)}:"
                    " not one benchmark"
                )
    for label, report in runs:
        for index, benchmark in enumerate(report.benchmarks):
            if benchmark.measured_from is None:
                raise MergeError(
                    f"{label}: benchmark {index + 1} does not say where its measured window lies on the clock"
                    " (results of batchmark before 0.2); run it again to merge it"
                )


def _data_hash(report: RunReport) -> str | None:
    return report.data.content_hash if report.data is not None else None


def _part(benchmark: BenchmarkResult, name: str) -> tuple[DistributionSummary, Sketch | None]:
    return getattr(benchmark.distributions, name), benchmark.sketches.get(name)


def _name(benchmark: BenchmarkResult) -> str:
    swept = ", ".join(f"{name}={value}" for name, value in benchmark.swept.items())
    return f"{benchmark.strategy} ({swept})" if swept else benchmark.strategy


def _window(benchmark: BenchmarkResult) -> tuple[float, float]:
    start = benchmark.started_at + (benchmark.measured_from or 0.0)
    return start, start + benchmark.measured_duration


def _in_window(benchmark: BenchmarkResult, start: float, end: float) -> _InWindow:
    completed = errored = output_tokens = prompt_tokens = busy = 0.0
    for point in benchmark.timeline:
        bucket_start = benchmark.started_at + point.start
        overlap = min(end, bucket_start + point.width) - max(start, bucket_start)
        if overlap <= 0:
            continue
        share = overlap / point.width
        completed += point.completed * share
        errored += point.errored * share
        output_tokens += point.output_tokens * share
        prompt_tokens += point.prompt_tokens * share
        busy += point.engine_busy * share
    return _InWindow(completed, errored, output_tokens, prompt_tokens, busy)


def _merge_benchmark(index: int, runs: list[tuple[str, RunReport, BenchmarkResult]]) -> BenchmarkResult:
    windows = [_window(benchmark) for _, _, benchmark in runs]
    start, end = max(low for low, _ in windows), min(high for _, high in windows)
    if end <= start:
        spans = ", ".join(
            f"{label} {low:.1f}-{high:.1f}" for (label, _, _), (low, high) in zip(runs, windows, strict=True)
        )
        raise MergeError(
            f"benchmark {index + 1} ({_name(runs[0][2])}): the runs' measured windows share no moment (Unix seconds:"
            f" {spans}); start them together, or measure longer than the time between their starts"
        )
    seconds = end - start
    inside = [_in_window(benchmark, start, end) for _, _, benchmark in runs]
    replicas = [replica for label, report, benchmark in runs for replica in _replicas_of(label, report, benchmark)]
    replicas = [replica.model_copy(update={"replica": number}) for number, replica in enumerate(replicas)]
    benchmarks = [benchmark for _, _, benchmark in runs]
    completed = sum(part.completed for part in inside)
    output_tokens = sum(part.output_tokens for part in inside)
    prompt_tokens = sum(part.prompt_tokens for part in inside)
    steps = sum(benchmark.engine_steps for benchmark in benchmarks)
    measured_requests = sum(benchmark.requests.completed + benchmark.requests.errored for benchmark in benchmarks)
    cpu = [benchmark.harness_cpu_seconds for benchmark in benchmarks]
    finished = sum(benchmark.requests.completed + benchmark.requests.errored for benchmark in benchmarks)
    histogram: Counter[int] = Counter()
    for benchmark in benchmarks:
        histogram.update(dict(benchmark.batch_size_histogram))
    first = benchmarks[0]
    earliest = min(benchmark.started_at for benchmark in benchmarks)
    starts = [low for low, _ in windows]
    summary = replicas_summary(replicas, start_skew_seconds=max(starts) - min(starts))
    return first.model_copy(
        update={
            "stop_reason": "; ".join(sorted({benchmark.stop_reason for benchmark in benchmarks})),
            "interrupted": any(benchmark.interrupted for benchmark in benchmarks),
            "started_at": earliest,
            "duration": max(benchmark.started_at + benchmark.duration for benchmark in benchmarks) - earliest,
            "measured_duration": seconds,
            "measured_from": start - earliest,
            "requests": RequestCounts(
                completed=round(completed),
                errored=round(sum(part.errored for part in inside)),
                incomplete=sum(benchmark.requests.incomplete for benchmark in benchmarks),
                excluded=sum(benchmark.requests.excluded for benchmark in benchmarks),
            ),
            "tokens": {"prompt": round(prompt_tokens), "output": round(output_tokens)},
            "throughput": Throughput.over(seconds, completed, output_tokens, prompt_tokens),
            "engine_utilization": min(1.0, sum(part.busy for part in inside) / (seconds * len(replicas))),
            "engine_steps": steps,
            "engine_steps_per_1000_requests": 1000 * steps / measured_requests if steps and measured_requests else None,
            "harness_cpu_seconds": None if None in cpu else sum(value or 0.0 for value in cpu),
            "harness_cpu_per_request": (
                None if None in cpu or not finished else sum(value or 0.0 for value in cpu) / finished
            ),
            "batches": sum(benchmark.batches for benchmark in benchmarks),
            "batch_size_histogram": sorted(histogram.items()),
            "distributions": Distributions(
                **{
                    name: merged_summary(
                        [
                            (getattr(benchmark.distributions, name), benchmark.sketches.get(name))
                            for benchmark in benchmarks
                        ]
                    )
                    for name in Distributions.model_fields
                }
            ),
            "sketches": {},
            "timeline": _merged_timeline(benchmarks, earliest),
            "samples": [],
            "slo": None,
            "cost": None,
            "replicas": replicas,
            "replica_summary": summary,
        }
    )


def _replicas_of(label: str, report: RunReport, benchmark: BenchmarkResult) -> list[ReplicaResult]:
    """A run's engines as replicas of the merged fleet: its own replicas, or the run itself as one."""
    if benchmark.replicas:
        return [replica.model_copy(update={"devices": f"{label}: {replica.devices}"}) for replica in benchmark.replicas]
    batches = benchmark.batches
    return [
        ReplicaResult(
            replica=0,
            devices=f"{label}: {report.engine.gpu_name or report.engine.kind}",
            requests=benchmark.requests,
            tokens=benchmark.tokens,
            throughput=benchmark.throughput,
            engine_utilization=benchmark.engine_utilization,
            batches=batches,
            mean_batch_size=benchmark.distributions.batch_size.mean,
            request_latency=benchmark.distributions.request_latency,
        )
    ]


def _merged_timeline(benchmarks: list[BenchmarkResult], earliest: float) -> list[TimelinePoint]:
    """The runs' timelines on one clock, in buckets as wide as the widest run's, each run's bucket counted in the
    merged bucket that holds its middle."""
    width = max((point.width for benchmark in benchmarks for point in benchmark.timeline), default=0.0)
    if width <= 0:
        return []
    merged: dict[int, list[float]] = {}
    for benchmark in benchmarks:
        for point in benchmark.timeline:
            middle = benchmark.started_at + point.start + point.width / 2 - earliest
            sums = merged.setdefault(min(int(middle / width), MAX_MERGED_TIMELINE - 1), [0.0] * 5)
            for position, amount in enumerate(
                (point.completed, point.errored, point.output_tokens, point.prompt_tokens, point.engine_busy)
            ):
                sums[position] += amount
    return [
        TimelinePoint(
            start=index * width,
            width=width,
            completed=int(sums[0]),
            errored=int(sums[1]),
            output_tokens=int(sums[2]),
            prompt_tokens=int(sums[3]),
            engine_busy=sums[4],
        )
        for index, sums in sorted(merged.items())
    ]
