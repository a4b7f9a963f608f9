"""The report page's engine replicas table: each replica's own figures under its benchmark, then their aggregate
with the spread (straggler ratio) and the scaling against one replica."""

from __future__ import annotations

from collections.abc import Sequence

from batchmark.runner.results.budget import describe_point
from batchmark.runner.results.htmlreport.tables import TableRow
from batchmark.runner.results.presentation import fixed, share, swept_order
from batchmark.runner.results.report import BenchmarkResult, ReplicaResult, RunReport


def replica_rows(reports: Sequence[tuple[str, RunReport]]) -> list[TableRow]:
    """Rows of every benchmark that ran several replicas, in the sweep's order; none when no benchmark did."""
    rows: list[TableRow] = []
    for run_label, report in reports:
        for index in swept_order(report):
            benchmark = report.benchmarks[index]
            if not benchmark.replicas or benchmark.replica_summary is None:
                continue
            name = describe_point(benchmark)
            if report.repeats > 1:
                name += f" (repeat {benchmark.repeat + 1}/{report.repeats})"
            group = f"{run_label}/{index}"
            rows.extend(
                TableRow(_replica(run_label, name, replica), "replica", group) for replica in benchmark.replicas
            )
            rows.append(TableRow(_aggregate(run_label, name, benchmark), "replicas", group))
    return rows


def _replica(run_label: str, name: str, replica: ReplicaResult) -> dict[str, str]:
    counts = replica.requests
    return {
        "run": run_label,
        "benchmark": name,
        "replica": str(replica.replica),
        "devices": replica.devices,
        "requests ok/err/incompl": f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
        "req/s": fixed(replica.throughput.requests_per_second, 2),
        "out tok/s": fixed(replica.throughput.output_tokens_per_second, 1),
        "batch": fixed(replica.mean_batch_size, 1),
        "util %": fixed(replica.engine_utilization * 100, 1),
        "lat p50, s": fixed(replica.request_latency.median, 3),
        "lat p99, s": fixed(replica.request_latency.p99, 3),
        "straggler": "",
        "scaling": "",
    }


def _aggregate(run_label: str, name: str, benchmark: BenchmarkResult) -> dict[str, str]:
    summary = benchmark.replica_summary
    assert summary is not None
    counts = benchmark.requests
    latency = benchmark.distributions.request_latency
    return {
        "run": run_label,
        "benchmark": name,
        "replica": f"all {summary.count}",
        "devices": "",
        "requests ok/err/incompl": f"{counts.completed:,}/{counts.errored:,}/{counts.incomplete:,}",
        "req/s": fixed(benchmark.throughput.requests_per_second, 2),
        "out tok/s": fixed(benchmark.throughput.output_tokens_per_second, 1),
        "batch": fixed(benchmark.distributions.batch_size.mean, 1),
        "util %": fixed(benchmark.engine_utilization * 100, 1),
        "lat p50, s": fixed(latency.median, 3),
        "lat p99, s": fixed(latency.p99, 3),
        "straggler": fixed(summary.straggler_ratio, 2),
        "scaling": share(summary.scaling_efficiency),
    }
