"""The three dashboards: "Benchmark run" (a run's live series), "Batch size comparison" (finished benchmarks'
results from the operator's gauges) and "Operator" (the operator's own health).

Every query reads series of the metrics contract (batchmark.runner.series), named through its declarations: the
runner's live ones (scraped from the benchmark pods by the chart's PodMonitor, which adds `namespace` and `pod`)
and the operator's (its /metrics, scraped through the chart's ServiceMonitor). Panels pick a data source through
the `datasource` variable, so the dashboards work with whatever Prometheus a Grafana has.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders import barchart, dashboard, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models.common import BigValueColorMode, BigValueTextMode, LegendDisplayMode
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from batchmark.runner import series

CHART_DASHBOARDS: Final = Path(__file__).resolve().parent.parent / "charts" / "batchmark" / "dashboards"
DATASOURCE: Final = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Grafana's own interval for rate(): at least four scrape intervals, whatever the scrape interval is.
RATE: Final = "$__rate_interval"

# The runner's series of one run, narrowed by the dashboard's variables (multi-value, "All" matches any).
RUN: Final = 'namespace=~"$namespace", benchmark=~"$benchmark", run_id=~"$run"'
# The operator's result gauges, narrowed by the comparison dashboard's variables.
RESULT: Final = 'namespace=~"$namespace", model=~"$model"'
# One point of one benchmark: the operator's result labels but `repeat`, so a point's repeats read as their mean.
RESULT_LABELS: Final = ", ".join(label for label in series.OPERATOR_RESULT_LABELS if label != "repeat")
# One benchmark of one run (a sweep's runs measure one batch size after another): what the run dashboard's
# quantiles group by besides `le`, so that selecting several runs never blends their histograms into one.
ONE_BENCHMARK: Final = ", ".join(series.RUN_LABELS)
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


def quantile(q: float, histogram: series.Series, selector: str, by: str, legend: str, ref: str) -> prometheus.Dataquery:
    """One quantile of a histogram over the rate window, a series per value of the ``by`` labels."""
    grouping = ", ".join(["le", *(label.strip() for label in by.split(",") if label.strip())])
    buckets = histogram.sample("_bucket")
    return query(
        f"histogram_quantile({q}, sum by ({grouping}) (rate({buckets}{{{selector}}}[{RATE}])))",
        f"{legend}p{round(q * 100)}",
        ref,
    )


def quantiles(histogram: series.Series, selector: str, by: str = "", legend: str = "") -> list[prometheus.Dataquery]:
    """p50, p90 and p99 of a histogram over the rate window, each per value of the ``by`` labels."""
    return [quantile(q, histogram, selector, by, legend, ref) for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))]


# The run dashboard's selectors of the runner's series, narrowed to the selected runs.
PHASE: Final = f"{series.PHASE.name}{{{RUN}}}"
REQUESTS: Final = series.REQUESTS.sample("_total")
OUTPUT_TOKENS: Final = series.OUTPUT_TOKENS.sample("_total")
PROMPT_TOKENS: Final = series.PROMPT_TOKENS.sample("_total")
RUN_INFO: Final = series.RUN_INFO.sample("_info")


def run_variables() -> list[dashboard.QueryVariable]:
    """Namespace, benchmark and run, each narrowed by the ones before it."""
    return [
        variable("namespace", "Namespace", f"label_values({RUN_INFO}, namespace)"),
        variable("benchmark", "Benchmark", f'label_values({RUN_INFO}{{namespace=~"$namespace"}}, benchmark)'),
        variable("run", "Run", f'label_values({RUN_INFO}{{namespace=~"$namespace", benchmark=~"$benchmark"}}, run_id)'),
    ]


def phase_changes() -> dashboard.AnnotationQuery:
    return (
        dashboard.AnnotationQuery()
        .name("Phase changes")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("blue")
        .expr(f"({PHASE} == 1) and on (benchmark, run_id, phase) (changes({PHASE}[1m]) > 0)")
    )


def phase_stat() -> stat.Panel:
    return single(
        "Phase",
        "The phase each selected run is in: loading, warmup, measuring, cooldown, done.",
        "none",
        query(f"max by (benchmark, run_id, phase) ({PHASE}) == 1", "{{benchmark}} {{run_id}}: {{phase}}", instant=True),
    ).text_mode(BigValueTextMode.NAME)


def model_stat() -> stat.Panel:
    return single(
        "Model and batch size",
        "What the run benchmarks: the model and the configured batch size.",
        "none",
        query(f"max by (model, batch_size) ({RUN_INFO}{{{RUN}}})", "{{model}} × {{batch_size}}", instant=True),
    ).text_mode(BigValueTextMode.NAME)


def engine_load_stat() -> stat.Panel:
    return single(
        "Engine load time",
        "Time to load the engine, outside every timed phase, per run.",
        "s",
        query(f"max by (benchmark, run_id) ({series.ENGINE_LOAD.name}{{{RUN}}})", "{{benchmark}} {{run_id}}"),
    )


def output_tokens_stat() -> stat.Panel:
    return single(
        "Output tokens/s",
        "Generated tokens per second over the rate window.",
        "short",
        query(f"sum(rate({OUTPUT_TOKENS}{{{RUN}}}[{RATE}]))"),
    )


def errored_stat() -> stat.Panel:
    return single(
        "Errored requests",
        "Measured requests that failed, over the dashboard's time range.",
        "short",
        query(f'sum(increase({REQUESTS}{{{RUN}, outcome="error"}}[$__range]))'),
    )


def phase_timeline() -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title("Phases")
        .description("Which phase each selected run was in, over time.")
        .datasource(DATASOURCE)
        .height(5)
        .span(24)
        .with_target(query(f"max by (benchmark, run_id, phase) ({PHASE}) == 1", "{{benchmark}} {{run_id}} {{phase}}"))
    )


def tokens_graph() -> timeseries.Panel:
    def rate_of(counter: str) -> str:
        return f"rate({counter}{{{RUN}}}[{RATE}])"

    return graph(
        "Tokens/s",
        "Output, prompt and total tokens per second of measured successful requests.",
        "short",
        query(f"sum by (benchmark, run_id) ({rate_of(OUTPUT_TOKENS)})", "output {{benchmark}} {{run_id}}", "A"),
        query(f"sum by (benchmark, run_id) ({rate_of(PROMPT_TOKENS)})", "prompt {{benchmark}} {{run_id}}", "B"),
        query(
            f"sum by (benchmark, run_id) ({rate_of(OUTPUT_TOKENS)} + {rate_of(PROMPT_TOKENS)})",
            "total {{benchmark}} {{run_id}}",
            "C",
        ),
    )


def replicas_graph() -> timeseries.Panel:
    return graph(
        "Output tokens/s per engine replica",
        "Each engine replica's generated tokens per second (backend.replicas; one line with one replica): an uneven"
        " fleet shows as lines apart, a stalled replica as one falling to zero.",
        "short",
        query(
            f"sum by (benchmark, run_id, replica) (rate({OUTPUT_TOKENS}{{{RUN}}}[{RATE}]))",
            "replica {{replica}} {{benchmark}} {{run_id}}",
        ),
    )


def requests_graph() -> timeseries.Panel:
    return graph(
        "Requests/s",
        "Measured requests per second by outcome (success, error, incomplete).",
        "reqps",
        query(
            f"sum by (benchmark, run_id, outcome) (rate({REQUESTS}{{{RUN}}}[{RATE}]))",
            "{{outcome}} {{benchmark}} {{run_id}}",
        ),
    )


def latency_graph() -> timeseries.Panel:
    return graph(
        "Request latency",
        "Enqueue to completion, quantiles from the runner's histogram, per benchmark and run.",
        "s",
        *quantiles(series.REQUEST_LATENCY, RUN, ONE_BENCHMARK, f"{ONE_BENCHMARK_LEGEND} "),
    )


def waits_graph() -> timeseries.Panel:
    return graph(
        "Queue and batch wait",
        "Enqueue to dispatch (queue) and enqueue until the request's micro-batch was complete (batch), per"
        " benchmark and run.",
        "s",
        *(
            quantile(q, histogram, RUN, ONE_BENCHMARK, f"{name} {ONE_BENCHMARK_LEGEND} ", ref)
            for q, histogram, name, ref in (
                (0.5, series.QUEUE_WAIT, "queue", "A"),
                (0.99, series.QUEUE_WAIT, "queue", "B"),
                (0.5, series.BATCH_WAIT, "batch", "C"),
                (0.99, series.BATCH_WAIT, "batch", "D"),
            )
        ),
    )


def batch_size_graph() -> timeseries.Panel:
    sizes = series.EFFECTIVE_BATCH_SIZE
    return graph(
        "Effective batch size",
        "Mean requests per dispatched micro-batch over the rate window, against the configured size.",
        "short",
        query(
            f"sum by (benchmark, run_id) (rate({sizes.sample('_sum')}{{{RUN}}}[{RATE}]))"
            f" / sum by (benchmark, run_id) (rate({sizes.sample('_count')}{{{RUN}}}[{RATE}]))",
            "mean {{benchmark}} {{run_id}}",
        ),
    )


def in_flight_graph() -> timeseries.Panel:
    return graph(
        "Requests in flight and queued",
        "Issued and not finished; waiting in the engine worker for a micro-batch.",
        "short",
        query(
            f"sum by (benchmark, run_id) ({series.REQUESTS_IN_FLIGHT.name}{{{RUN}}})",
            "in flight {{benchmark}} {{run_id}}",
            "A",
        ),
        query(
            f"sum by (benchmark, run_id) ({series.REQUESTS_QUEUED.name}{{{RUN}}})",
            "queued {{benchmark}} {{run_id}}",
            "B",
        ),
    )


def batch_duration_graph() -> timeseries.Panel:
    return graph(
        "Micro-batch duration",
        "One generate() call of a measured micro-batch, per benchmark and run.",
        "s",
        *quantiles(series.BATCH_DURATION, RUN, ONE_BENCHMARK, f"{ONE_BENCHMARK_LEGEND} "),
    )


def errors_graph() -> timeseries.Panel:
    return graph(
        "Errors/s",
        "Measured requests that failed, per second.",
        "reqps",
        query(f'sum by (benchmark, run_id) (rate({REQUESTS}{{{RUN}, outcome="error"}}[{RATE}]))'),
    )


# The run dashboard's rows and the panels of each, in order.
RUN_ROWS: Final[tuple[tuple[str, tuple[Callable[[], Builder[models.Panel]], ...]], ...]] = (
    ("Overview", (phase_stat, model_stat, engine_load_stat, output_tokens_stat, errored_stat, phase_timeline)),
    ("Throughput", (tokens_graph, requests_graph, replicas_graph)),
    ("Latency", (latency_graph, waits_graph)),
    ("Batching", (batch_size_graph, in_flight_graph, batch_duration_graph, errors_graph)),
)


def benchmark_run() -> models.Dashboard:
    board = (
        dashboard.Dashboard("batchmark / Benchmark run")
        .uid("batchmark-benchmark-run")
        .description("A benchmark's live series from the runner's /metrics: throughput, latency, batching, phase.")
        .tags(["batchmark"])
        .refresh("10s")
        .time("now-30m", "now")
        .with_variable(datasource_variable())
    )
    for run_variable in run_variables():
        board = board.with_variable(run_variable)
    board = board.annotation(phase_changes())
    for title, panels in RUN_ROWS:
        board = board.with_row(dashboard.Row(title))
        for panel in panels:
            board = board.with_panel(panel())
    return board.build()


def point_mean(metric: series.Series) -> str:
    """A result gauge per point: the mean over its repeats (a run without repeats has one series per point)."""
    return f"avg by ({RESULT_LABELS}) ({metric.name}{{{RESULT}}})"


def result_column(metric: series.Series, ref: str) -> prometheus.Dataquery:
    return query(point_mean(metric), ref=ref, instant=True)


def by_batch_size(title: str, description: str, unit: str, metric: series.Series) -> barchart.Panel:
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
    (series.OPERATOR_OUTPUT_TOKENS_PER_SECOND, "Output tok/s"),
    (series.OPERATOR_TOTAL_TOKENS_PER_SECOND, "Total tok/s"),
    (series.OPERATOR_REQUESTS_PER_SECOND, "Req/s"),
    (series.OPERATOR_LATENCY_P50, "Latency p50 (s)"),
    (series.OPERATOR_LATENCY_P99, "Latency p99 (s)"),
    (series.OPERATOR_TTFT_P99, "TTFT p99 (s)"),
    (series.OPERATOR_ENGINE_UTILIZATION, "Engine utilisation"),
)
# The comparison dashboard's variables list the values of the output throughput's labels.
THROUGHPUT: Final = series.OPERATOR_OUTPUT_TOKENS_PER_SECOND.name


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
            f"count by ({RESULT_LABELS}) ({THROUGHPUT}{{{RESULT}}})",
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
        .with_variable(variable("namespace", "Namespace", f"label_values({THROUGHPUT}, namespace)"))
        .with_variable(variable("model", "Model", f'label_values({THROUGHPUT}{{namespace=~"$namespace"}}, model)'))
        .with_panel(results_table)
        .with_panel(
            by_batch_size(
                "Output tokens/s by batch size",
                "Higher is better: where the bars stop growing, a larger batch buys nothing.",
                "short",
                series.OPERATOR_OUTPUT_TOKENS_PER_SECOND,
            )
        )
        .with_panel(
            by_batch_size(
                "p99 latency by batch size",
                "Lower is better: the price of a larger batch in tail latency.",
                "s",
                series.OPERATOR_LATENCY_P99,
            )
        )
        .build()
    )


# The operator's reconciles, as its dashboard reads them.
RECONCILES: Final = series.RECONCILES.sample("_total")


def operator() -> models.Dashboard:
    return (
        dashboard.Dashboard("batchmark / Operator")
        .uid("batchmark-operator")
        .description("The batchmark operator: reconciles, their duration and errors, BatchBenchmarks by phase.")
        .tags(["batchmark"])
        .refresh("30s")
        .time("now-6h", "now")
        .with_variable(datasource_variable())
        .with_variable(variable("job", "Job", f"label_values({RECONCILES}, job)"))
        .with_panel(
            graph(
                "Reconciles/s",
                "Reconciliations per second by outcome (success, error, retry).",
                "ops",
                query(
                    f'sum by (outcome) (rate({RECONCILES}{{job=~"$job"}}[{RATE}]))',
                    "{{outcome}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Reconcile duration",
                "Quantiles of a reconciliation's duration, all outcomes.",
                "s",
                *quantiles(series.RECONCILE_DURATION, 'job=~"$job"', "job", "{{job}} "),
            )
        )
        .with_panel(
            graph(
                "Reconcile errors/s",
                "Reconciliations that ended in an error, per second.",
                "ops",
                query(
                    f'sum(rate({RECONCILES}{{job=~"$job", outcome="error"}}[{RATE}]))',
                    "errors",
                ),
            )
        )
        .with_panel(
            graph(
                "BatchBenchmarks by phase",
                "How many BatchBenchmarks are in each phase now.",
                "short",
                query(f'sum by (phase) ({series.BENCHMARKS.name}{{job=~"$job"}})', "{{phase}}"),
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
