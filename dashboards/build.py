"""The three dashboards: "Benchmark run" (a run's live series), "Batch size comparison" (finished benchmarks'
results from the operator's gauges) and "Operator" (the operator's own health).

Every query reads series that batchmark declares: the runner's (batchmark.runner.observe.metrics, scraped from the
benchmark pods by the chart's PodMonitor, which adds `namespace` and `pod`) and the operator's (its /metrics,
scraped through the chart's ServiceMonitor). Panels pick a data source through the `datasource` variable, so
the dashboards work with whatever Prometheus a Grafana has.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders import barchart, dashboard, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models.common import BigValueColorMode, BigValueTextMode, LegendDisplayMode
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

CHART_DASHBOARDS: Final = Path(__file__).resolve().parent.parent / "charts" / "batchmark" / "dashboards"
DATASOURCE: Final = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Grafana's own interval for rate(): at least four scrape intervals, whatever the scrape interval is.
RATE: Final = "$__rate_interval"

# The runner's series of one run, narrowed by the dashboard's variables (multi-value, "All" matches any).
RUN: Final = 'namespace=~"$namespace", benchmark=~"$benchmark", run_id=~"$run"'
# The operator's result gauges, narrowed by the comparison dashboard's variables.
RESULT: Final = 'namespace=~"$namespace", model=~"$model"'
# One point of one benchmark: the operator's result labels but `repeat`, so a point's repeats read as their mean.
RESULT_LABELS: Final = "namespace, name, model, batch_size, strategy, engine, swept"
# One benchmark of one run (a sweep's runs measure one batch size after another): what the run dashboard's
# quantiles group by besides `le`, so that selecting several runs never blends their histograms into one.
ONE_BENCHMARK: Final = "benchmark, run_id, batch_size"
ONE_BENCHMARK_LEGEND: Final = "{{benchmark}} {{run_id}} ×{{batch_size}}"


def query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    built = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        built = built.legend_format(legend)
    if instant:
        built = built.instant().format(PromQueryFormat.TABLE)
    return built


def variable(name: str, label: str, values_of: str, *, multi: bool = True) -> dashboard.QueryVariable:
    """A variable listing a label's values; multi-value with "All" (as `.*`, so a regex matcher takes it)."""
    built = (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": values_of, "refId": f"{name}-values"})
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        built = built.multi(True).include_all(True).all_value(".*")
    return built


def datasource_variable() -> dashboard.DatasourceVariable:
    return dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")


def graph(title: str, description: str, unit: str, *targets: prometheus.Dataquery) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .min(0)
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .legend(VizLegendOptions().display_mode(LegendDisplayMode.LIST).show_legend(True))
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def single(title: str, description: str, unit: str, target: prometheus.Dataquery) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .height(4)
        .span(6)
        .color_mode(BigValueColorMode.NONE)
        .with_target(target)
    )


def quantile(q: float, histogram: str, selector: str, by: str, legend: str, ref: str) -> prometheus.Dataquery:
    """One quantile of a histogram over the rate window, a series per value of the ``by`` labels."""
    grouping = ", ".join(["le", *(label.strip() for label in by.split(",") if label.strip())])
    return query(
        f"histogram_quantile({q}, sum by ({grouping}) (rate({histogram}_bucket{{{selector}}}[{RATE}])))",
        f"{legend}p{round(q * 100)}",
        ref,
    )


def quantiles(histogram: str, selector: str, by: str = "", legend: str = "") -> list[prometheus.Dataquery]:
    """p50, p90 and p99 of a histogram over the rate window, each per value of the ``by`` labels."""
    return [quantile(q, histogram, selector, by, legend, ref) for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))]


def benchmark_run() -> models.Dashboard:
    tokens = "sum by (benchmark, run_id) (rate(batchmark_{kind}_tokens_total{{{run}}}[{rate}]))"
    return (
        dashboard.Dashboard("batchmark / Benchmark run")
        .uid("batchmark-benchmark-run")
        .description("A benchmark's live series from the runner's /metrics: throughput, latency, batching, phase.")
        .tags(["batchmark"])
        .refresh("10s")
        .time("now-30m", "now")
        .with_variable(datasource_variable())
        .with_variable(variable("namespace", "Namespace", "label_values(batchmark_info, namespace)"))
        .with_variable(
            variable("benchmark", "Benchmark", 'label_values(batchmark_info{namespace=~"$namespace"}, benchmark)')
        )
        .with_variable(
            variable(
                "run",
                "Run",
                'label_values(batchmark_info{namespace=~"$namespace", benchmark=~"$benchmark"}, run_id)',
            )
        )
        .annotation(
            dashboard.AnnotationQuery()
            .name("Phase changes")
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color("blue")
            .expr(
                f"(batchmark_phase{{{RUN}}} == 1)"
                f" and on (benchmark, run_id, phase) (changes(batchmark_phase{{{RUN}}}[1m]) > 0)"
            )
        )
        .with_row(dashboard.Row("Overview"))
        .with_panel(
            single(
                "Phase",
                "The phase each selected run is in: loading, warmup, measuring, cooldown, done.",
                "none",
                query(
                    f"max by (benchmark, run_id, phase) (batchmark_phase{{{RUN}}}) == 1",
                    "{{benchmark}} {{run_id}}: {{phase}}",
                    instant=True,
                ),
            ).text_mode(BigValueTextMode.NAME)
        )
        .with_panel(
            single(
                "Model and batch size",
                "What the run benchmarks: the model and the configured batch size.",
                "none",
                query(
                    f"max by (model, batch_size) (batchmark_info{{{RUN}}})", "{{model}} × {{batch_size}}", instant=True
                ),
            ).text_mode(BigValueTextMode.NAME)
        )
        .with_panel(
            single(
                "Engine load time",
                "Time to load the engine, outside every timed phase, per run.",
                "s",
                query(
                    f"max by (benchmark, run_id) (batchmark_engine_load_seconds{{{RUN}}})", "{{benchmark}} {{run_id}}"
                ),
            )
        )
        .with_panel(
            single(
                "Output tokens/s",
                "Generated tokens per second over the rate window.",
                "short",
                query(f"sum(rate(batchmark_output_tokens_total{{{RUN}}}[{RATE}]))"),
            )
        )
        .with_panel(
            single(
                "Errored requests",
                "Measured requests that failed, over the dashboard's time range.",
                "short",
                query(f'sum(increase(batchmark_requests_total{{{RUN}, outcome="error"}}[$__range]))'),
            )
        )
        .with_panel(
            statetimeline.Panel()
            .title("Phases")
            .description("Which phase each selected run was in, over time.")
            .datasource(DATASOURCE)
            .height(5)
            .span(24)
            .with_target(
                query(
                    f"max by (benchmark, run_id, phase) (batchmark_phase{{{RUN}}}) == 1",
                    "{{benchmark}} {{run_id}} {{phase}}",
                )
            )
        )
        .with_row(dashboard.Row("Throughput"))
        .with_panel(
            graph(
                "Tokens/s",
                "Output, prompt and total tokens per second of measured successful requests.",
                "short",
                query(tokens.format(kind="output", run=RUN, rate=RATE), "output {{benchmark}} {{run_id}}", "A"),
                query(tokens.format(kind="prompt", run=RUN, rate=RATE), "prompt {{benchmark}} {{run_id}}", "B"),
                query(
                    f"sum by (benchmark, run_id) (rate(batchmark_output_tokens_total{{{RUN}}}[{RATE}])"
                    f" + rate(batchmark_prompt_tokens_total{{{RUN}}}[{RATE}]))",
                    "total {{benchmark}} {{run_id}}",
                    "C",
                ),
            )
        )
        .with_panel(
            graph(
                "Requests/s",
                "Measured requests per second by outcome (success, error, incomplete).",
                "reqps",
                query(
                    f"sum by (benchmark, run_id, outcome) (rate(batchmark_requests_total{{{RUN}}}[{RATE}]))",
                    "{{outcome}} {{benchmark}} {{run_id}}",
                ),
            )
        )
        .with_row(dashboard.Row("Latency"))
        .with_panel(
            graph(
                "Request latency",
                "Enqueue to completion, quantiles from the runner's histogram, per benchmark and run.",
                "s",
                *quantiles("batchmark_request_latency_seconds", RUN, ONE_BENCHMARK, f"{ONE_BENCHMARK_LEGEND} "),
            )
        )
        .with_panel(
            graph(
                "Queue and batch wait",
                "Enqueue to dispatch (queue) and enqueue until the request's micro-batch was complete (batch), per"
                " benchmark and run.",
                "s",
                quantile(
                    0.5, "batchmark_queue_wait_seconds", RUN, ONE_BENCHMARK, f"queue {ONE_BENCHMARK_LEGEND} ", "A"
                ),
                quantile(
                    0.99, "batchmark_queue_wait_seconds", RUN, ONE_BENCHMARK, f"queue {ONE_BENCHMARK_LEGEND} ", "B"
                ),
                quantile(
                    0.5, "batchmark_batch_wait_seconds", RUN, ONE_BENCHMARK, f"batch {ONE_BENCHMARK_LEGEND} ", "C"
                ),
                quantile(
                    0.99, "batchmark_batch_wait_seconds", RUN, ONE_BENCHMARK, f"batch {ONE_BENCHMARK_LEGEND} ", "D"
                ),
            )
        )
        .with_row(dashboard.Row("Batching"))
        .with_panel(
            graph(
                "Effective batch size",
                "Mean requests per dispatched micro-batch over the rate window, against the configured size.",
                "short",
                query(
                    f"sum by (benchmark, run_id) (rate(batchmark_effective_batch_size_sum{{{RUN}}}[{RATE}]))"
                    f" / sum by (benchmark, run_id) (rate(batchmark_effective_batch_size_count{{{RUN}}}[{RATE}]))",
                    "mean {{benchmark}} {{run_id}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Requests in flight and queued",
                "Issued and not finished; waiting in the engine worker for a micro-batch.",
                "short",
                query(
                    f"sum by (benchmark, run_id) (batchmark_requests_in_flight{{{RUN}}})",
                    "in flight {{benchmark}} {{run_id}}",
                    "A",
                ),
                query(
                    f"sum by (benchmark, run_id) (batchmark_requests_queued{{{RUN}}})",
                    "queued {{benchmark}} {{run_id}}",
                    "B",
                ),
            )
        )
        .with_panel(
            graph(
                "Micro-batch duration",
                "One generate() call of a measured micro-batch, per benchmark and run.",
                "s",
                *quantiles("batchmark_batch_duration_seconds", RUN, ONE_BENCHMARK, f"{ONE_BENCHMARK_LEGEND} "),
            )
        )
        .with_panel(
            graph(
                "Errors/s",
                "Measured requests that failed, per second.",
                "reqps",
                query(f'sum by (benchmark, run_id) (rate(batchmark_requests_total{{{RUN}, outcome="error"}}[{RATE}]))'),
            )
        )
        .build()
    )


def point_mean(metric: str) -> str:
    """A result gauge per point: the mean over its repeats (a run without repeats has one series per point)."""
    return f"avg by ({RESULT_LABELS}) (batchmark_result_{metric}{{{RESULT}}})"


def result_column(metric: str, ref: str) -> prometheus.Dataquery:
    return query(point_mean(metric), ref=ref, instant=True)


def by_batch_size(title: str, description: str, unit: str, metric: str) -> barchart.Panel:
    """One bar per batch size, one colour per model: the best batch size of a model is read at a glance."""
    return (
        barchart.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .height(9)
        .span(12)
        .x_field("batch_size")
        .with_target(query(f"max by (model, batch_size) ({point_mean(metric)})", instant=True))
        .with_transformation(
            models.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "model", "rowField": "batch_size", "valueField": "Value"},
            )
        )
        .with_transformation(
            models.DataTransformerConfig(id_val="sortBy", options={"sort": [{"field": "batch_size\\model"}]})
        )
    )


COMPARISON_COLUMNS: Final = (
    ("output_tokens_per_second", "Output tok/s"),
    ("total_tokens_per_second", "Total tok/s"),
    ("requests_per_second", "Req/s"),
    ("request_latency_p50_seconds", "Latency p50 (s)"),
    ("request_latency_p99_seconds", "Latency p99 (s)"),
    ("ttft_p99_seconds", "TTFT p99 (s)"),
    ("engine_utilization", "Engine utilisation"),
)


def batch_size_comparison() -> models.Dashboard:
    refs = "ABCDEFG"
    repeats_ref = "H"
    results_table = (
        table.Panel()
        .title("Finished benchmarks")
        .description(
            "Each finished BatchBenchmark's headline results, from the operator's result gauges: one row per sweep"
            " point, its figures the mean over its repeats."
        )
        .datasource(DATASOURCE)
        .height(10)
        .span(24)
        .with_transformation(models.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            models.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {
                        **{f"Value #{ref}": name for ref, (_, name) in zip(refs, COMPARISON_COLUMNS, strict=True)},
                        f"Value #{repeats_ref}": "Repeats",
                    },
                },
            )
        )
    )
    for ref, (metric, _) in zip(refs, COMPARISON_COLUMNS, strict=True):
        results_table = results_table.with_target(result_column(metric, ref))
    results_table = results_table.with_target(
        query(
            f"count by ({RESULT_LABELS}) (batchmark_result_output_tokens_per_second{{{RESULT}}})",
            ref=repeats_ref,
            instant=True,
        )
    )
    return (
        dashboard.Dashboard("batchmark / Batch size comparison")
        .uid("batchmark-batch-size-comparison")
        .description("Finished benchmarks side by side: throughput and tail latency against batch size, per model.")
        .tags(["batchmark"])
        .refresh("1m")
        .time("now-24h", "now")
        .with_variable(datasource_variable())
        .with_variable(
            variable("namespace", "Namespace", "label_values(batchmark_result_output_tokens_per_second, namespace)")
        )
        .with_variable(
            variable(
                "model",
                "Model",
                'label_values(batchmark_result_output_tokens_per_second{namespace=~"$namespace"}, model)',
            )
        )
        .with_panel(results_table)
        .with_panel(
            by_batch_size(
                "Output tokens/s by batch size",
                "Higher is better: where the bars stop growing, a larger batch buys nothing.",
                "short",
                "output_tokens_per_second",
            )
        )
        .with_panel(
            by_batch_size(
                "p99 latency by batch size",
                "Lower is better: the price of a larger batch in tail latency.",
                "s",
                "request_latency_p99_seconds",
            )
        )
        .build()
    )


def operator() -> models.Dashboard:
    return (
        dashboard.Dashboard("batchmark / Operator")
        .uid("batchmark-operator")
        .description("The batchmark operator: reconciles, their duration and errors, BatchBenchmarks by phase.")
        .tags(["batchmark"])
        .refresh("30s")
        .time("now-6h", "now")
        .with_variable(datasource_variable())
        .with_variable(variable("job", "Job", "label_values(batchmark_operator_reconciles_total, job)"))
        .with_panel(
            graph(
                "Reconciles/s",
                "Reconciliations per second by outcome (success, error, retry).",
                "ops",
                query(
                    f'sum by (outcome) (rate(batchmark_operator_reconciles_total{{job=~"$job"}}[{RATE}]))',
                    "{{outcome}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Reconcile duration",
                "Quantiles of a reconciliation's duration, all outcomes.",
                "s",
                *quantiles("batchmark_operator_reconcile_duration_seconds", 'job=~"$job"', "job", "{{job}} "),
            )
        )
        .with_panel(
            graph(
                "Reconcile errors/s",
                "Reconciliations that ended in an error, per second.",
                "ops",
                query(
                    f'sum(rate(batchmark_operator_reconciles_total{{job=~"$job", outcome="error"}}[{RATE}]))',
                    "errors",
                ),
            )
        )
        .with_panel(
            graph(
                "BatchBenchmarks by phase",
                "How many BatchBenchmarks are in each phase now.",
                "short",
                query('sum by (phase) (batchmark_operator_benchmarks{job=~"$job"})', "{{phase}}"),
            )
        )
        .build()
    )


DASHBOARDS: Final[dict[str, Callable[[], models.Dashboard]]] = {
    "benchmark-run.json": benchmark_run,
    "batch-size-comparison.json": batch_size_comparison,
    "operator.json": operator,
}


def render(built: models.Dashboard) -> str:
    return json.dumps(json.loads(JSONEncoder(sort_keys=True, indent=2).encode(built)), indent=2, sort_keys=True) + "\n"


def render_all() -> dict[str, str]:
    return {file_name: render(make()) for file_name, make in DASHBOARDS.items()}
