"""A run as llm-d Benchmark Reports v0.2 (BR0.2), the results format llm-d-benchmark reads from every harness.

A BR0.2 document describes one load point (one benchmark): llm-d-benchmark writes one per stage of a multi-stage
run. So a run becomes one document per benchmark, in the run's order, each naming the run in ``run.eid`` and its
benchmark's index in ``scenario.load.standardized.stage``; a run that ended before its first benchmark still
describes its stack in one document without results. Only what batchmark measured is filled: statistics it does not
compute (p0.1, p1, p5, p10, p25, p75, the mode, inter-token latency) are left out, never estimated.

The schema is kept in ``schemas/`` (see its README for the source and licence).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Literal

import yaml

from batchmark.runner.results.report import BenchmarkResult, RunReport, TimelinePoint
from batchmark.runner.results.stats import DistributionSummary

BR_VERSION = "0.2"
SCHEMA_FILE = "benchmark_report_v0_2.json"
TOOL = "batchmark"

# BR0.2's names of the statistics batchmark computes, with batchmark's own names.
_STATISTICS = (
    ("mean", "mean"),
    ("stddev", "std"),
    ("min", "min"),
    ("p50", "median"),
    ("p90", "p90"),
    ("p95", "p95"),
    ("p99", "p99"),
    ("p99p9", "p999"),
    ("max", "max"),
)

# How BR0.2 says the prompts were made: synthetic text is drawn at random, the others are the user's own records.
_SOURCES = {"synthetic_text": "random", "file": "sampled", "dataset": "sampled", "sharegpt": "sampled"}

SIMULATED_NOTE = "simulated engine: every figure is modelled by batchmark, not measured on a GPU"


def benchmark_reports(report: RunReport) -> list[dict[str, Any]]:
    """One BR0.2 document per benchmark, in the run's order (one without results when none ran)."""
    if not report.benchmarks:
        return [_document(report, None, 0)]
    return [_document(report, benchmark, index) for index, benchmark in enumerate(report.benchmarks)]


def benchmark_report(report: RunReport, index: int = 0) -> dict[str, Any]:
    """The BR0.2 document of the run's benchmark ``index`` (the whole run, for a run of one benchmark)."""
    return benchmark_reports(report)[index]


def benchmark_report_text(report: RunReport, form: Literal["yaml", "json"]) -> str:
    """The run's documents as one file: a YAML stream of them, or in JSON the one document or a list of them."""
    documents = benchmark_reports(report)
    if form == "yaml":
        return yaml.safe_dump_all(documents, sort_keys=False)
    return json.dumps(documents[0] if len(documents) == 1 else documents, indent=2)


def published_schema() -> dict[str, Any]:
    """BR0.2's JSON Schema as llm-d-benchmark publishes it, kept with this package."""
    text = resources.files("batchmark.runner.results").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _document(report: RunReport, benchmark: BenchmarkResult | None, index: int) -> dict[str, Any]:
    backend = _backend_as_run(report, benchmark)
    scenario = _present(stack=[_engine_component(report, backend)], load=_load(report, benchmark, index))
    return {
        "version": BR_VERSION,
        "run": _run(report, benchmark, index),
        "scenario": scenario,
        "results": _results(benchmark) if benchmark is not None else {},
    }


def _backend_as_run(report: RunReport, benchmark: BenchmarkResult | None) -> dict[str, Any]:
    """The backend settings the benchmark ran with: the config's, with its sweep point's values in place (as
    config.sweep.apply_overrides puts them)."""
    backend: dict[str, Any] = dict(report.config.get("backend") or {})
    backend["vllm_config"] = dict(backend.get("vllm_config") or {})
    for name, value in (benchmark.swept if benchmark is not None else {}).items():
        if name.startswith("vllm_config."):
            backend["vllm_config"][name.removeprefix("vllm_config.")] = value
        else:
            backend[name] = value
    return backend


# run


def _run(report: RunReport, benchmark: BenchmarkResult | None, index: int) -> dict[str, Any]:
    return {
        # One document per benchmark: the run's id alone would not be unique.
        "uid": f"{report.run_id}-{index}",
        "eid": report.run_id,
        "time": _run_time(report, benchmark),
        "description": _description(report, benchmark),
    }


def _run_time(report: RunReport, benchmark: BenchmarkResult | None) -> dict[str, Any]:
    if benchmark is None:
        return {"start": report.created_at}
    return {
        "start": _timestamp(benchmark.started_at),
        "end": _timestamp(benchmark.started_at + benchmark.duration),
        "duration": _iso_duration(benchmark.duration),
    }


def _description(report: RunReport, benchmark: BenchmarkResult | None) -> str:
    details = []
    if benchmark is not None:
        details += [f"{name}={value}" for name, value in benchmark.swept.items()]
        if report.repeats > 1:
            details.append(f"repeat {benchmark.repeat + 1} of {report.repeats}")
        if benchmark.interrupted:
            details.append("interrupted: partial results")
    else:
        details.append("no benchmark ran")
    if report.engine.simulated:
        details.append(SIMULATED_NOTE)
    head = f"{report.name}: {report.engine.model}" + (f", {benchmark.strategy}" if benchmark is not None else "")
    return f"{head} ({'; '.join(details)})" if details else head


# scenario.stack


def _engine_component(report: RunReport, backend: dict[str, Any]) -> dict[str, Any]:
    engine = report.engine
    vllm_config: dict[str, Any] = backend["vllm_config"]
    # batchmark's own settings of the engine (batch size, dispatch, ...): the engine arguments are native.args.
    settings = {name: value for name, value in backend.items() if name not in ("vllm_config", "simulation")}
    if engine.simulated:
        settings["simulation"] = backend.get("simulation")
    native = {
        "args": vllm_config,
        "config": {
            **settings,
            "simulated": engine.simulated,
            "engine_details": engine.model_dump(mode="json")["details"],
        },
    }
    return {
        "metadata": _present(
            label=f"{engine.kind}-engine",
            cfg_id=_config_id(native),
            description=(
                f"{SIMULATED_NOTE} (a model of vLLM on {engine.gpu_name})"
                if engine.simulated
                else "vLLM's offline engine (vllm.LLM) in batchmark's worker process"
            ),
        ),
        "standardized": {
            "kind": "inference_engine",
            "tool": f"{TOOL}-simulated" if engine.simulated else "vllm",
            "tool_version": report.batchmark_version if engine.simulated else engine.version or "unknown",
            "role": "replica",
            "replicas": int(backend.get("replicas", engine.replicas) or 1),
            "model": {"name": engine.model},
            "accelerator": _accelerator(engine.gpu_name, vllm_config),
        },
        "native": native,
    }


def _accelerator(gpu_name: str | None, vllm_config: dict[str, Any]) -> dict[str, Any]:
    """The device and the parallelism of one replica: llm-d-benchmark's own reports count the accelerators of one
    replica, beside the replica count."""
    tensor = int(vllm_config.get("tensor_parallel_size", 1) or 1)
    pipeline = int(vllm_config.get("pipeline_parallel_size", 1) or 1)
    data = vllm_config.get("data_parallel_size")
    on_cpu = gpu_name in (None, "cpu")
    return {
        "model": "cpu" if on_cpu else gpu_name,
        # What one vLLM replica occupies, tensor x pipeline (as results.cost counts it); a CPU run occupies none.
        "count": 0 if on_cpu else tensor * pipeline,
        "parallelism": _present(tp=tensor, pp=pipeline, dp=int(data) if data else None),
    }


# scenario.load


def _load(report: RunReport, benchmark: BenchmarkResult | None, index: int) -> dict[str, Any] | None:
    input_seq_len = _input_seq_len(report, benchmark)
    if input_seq_len is None:  # BR0.2 requires it; a run that measured no prompt has no workload to describe
        return None
    data_kind = report.data.kind if report.data is not None else str((report.config.get("data") or {}).get("kind"))
    native_config = {name: report.config.get(name) for name in ("data", "profile", "constraints", "sweep", "repeats")}
    if benchmark is not None:
        native_config["benchmark"] = {
            "strategy": benchmark.strategy,
            "kind": benchmark.kind,
            "point": benchmark.point,
            "repeat": benchmark.repeat,
            "swept": benchmark.swept,
        }
    return {
        "metadata": {
            "cfg_id": _config_id(native_config),
            "description": f"{data_kind} data, {benchmark.strategy if benchmark else 'no benchmark'}",
        },
        "standardized": _present(
            tool=TOOL,
            tool_version=report.batchmark_version,
            source=_SOURCES.get(data_kind, "unknown"),
            stage=index,
            input_seq_len=input_seq_len,
            output_seq_len=_output_seq_len(report),
            rate_qps=benchmark.rate if benchmark is not None and benchmark.rate else None,
            concurrency=benchmark.max_concurrency if benchmark is not None else None,
        ),
        "native": {"config": native_config},
    }


def _input_seq_len(report: RunReport, benchmark: BenchmarkResult | None) -> dict[str, Any] | None:
    """The prompts' lengths (shared prefix included) over the data's samples, or else as the engine counted them."""
    if report.data is not None:
        return _sequence_length(report.data.prompt_tokens, report.data.kind)
    if benchmark is not None:
        return _sequence_length(benchmark.distributions.prompt_tokens, "")
    return None


def _output_seq_len(report: RunReport) -> dict[str, Any] | None:
    """BR0.2 gives the output length only where it is enforced, as batchmark's data says it was."""
    if report.data is None or not report.data.forced_output_lengths:
        return None
    return _sequence_length(report.data.output_tokens, report.data.kind)


def _sequence_length(lengths: DistributionSummary, data_kind: str) -> dict[str, Any] | None:
    if lengths.mean is None:
        return None
    if lengths.min == lengths.max:
        distribution = "fixed"
    elif data_kind == "synthetic_text":
        distribution = "gaussian"  # drawn from a normal distribution, clipped to the bounds
    else:
        distribution = "other"
    return _present(
        distribution=distribution,
        value=_number(lengths.mean),
        std_dev=lengths.std if distribution != "fixed" else None,
        min=_whole(lengths.min),
        max=_whole(lengths.max),
    )


# results


def _results(benchmark: BenchmarkResult) -> dict[str, Any]:
    queue_wait = _statistics(benchmark.distributions.queue_wait, "s")
    return _present(
        request_performance=_present(aggregate=_aggregate(benchmark), time_series=_time_series(benchmark)),
        # BR0.2 has no field for it; its observability section takes a tool's own metrics beside its fields.
        observability={"batchmark_queue_wait": queue_wait} if queue_wait is not None else None,
    )


def _aggregate(benchmark: BenchmarkResult) -> dict[str, Any]:
    counts = benchmark.requests
    distributions = benchmark.distributions
    throughput = benchmark.throughput
    return _present(
        requests=_present(
            # Sent inside the measured window; warm-up and cool-down requests are left out, as from every figure.
            total=counts.completed + counts.errored + counts.incomplete,
            failures=counts.errored,
            incomplete=counts.incomplete,
            input_length=_statistics(distributions.prompt_tokens, "count"),
            output_length=_statistics(distributions.output_tokens, "count"),
        ),
        latency=_present(
            time_to_first_token=_statistics(distributions.time_to_first_token, "s"),
            time_per_output_token=_statistics(distributions.time_per_output_token, "s/token"),
            request_latency=_statistics(distributions.request_latency, "s"),
        )
        or None,
        # Rates over the measured window: one value each, so only a mean.
        throughput={
            "input_token_rate": {"units": "tokens/s", "mean": throughput.prompt_tokens_per_second},
            "output_token_rate": {"units": "tokens/s", "mean": throughput.output_tokens_per_second},
            "total_token_rate": {"units": "tokens/s", "mean": throughput.total_tokens_per_second},
            "request_rate": {"units": "queries/s", "mean": throughput.requests_per_second},
        },
    )


def _statistics(summary: DistributionSummary, units: str) -> dict[str, Any] | None:
    """BR0.2's statistics of one distribution: those batchmark computes, none of the others (null: no values)."""
    if summary.count == 0 or summary.mean is None:
        return None
    return _present(units=units, **{name: getattr(summary, ours) for name, ours in _STATISTICS})


def _time_series(benchmark: BenchmarkResult) -> dict[str, Any] | None:
    """Rates per timeline bucket (the whole benchmark, warm-up and cool-down included), each at its bucket's
    start."""
    buckets = [bucket for bucket in benchmark.timeline if bucket.width > 0]
    if not buckets:
        return None

    def rate(amount: Callable[[TimelinePoint], float], units: str) -> dict[str, Any]:
        series = [
            {"ts": _timestamp(benchmark.started_at + bucket.start), "value": amount(bucket) / bucket.width}
            for bucket in buckets
        ]
        return {"units": units, "series": series}

    return {
        "throughput": {
            "input_token_rate": rate(lambda bucket: bucket.prompt_tokens, "tokens/s"),
            "output_token_rate": rate(lambda bucket: bucket.output_tokens, "tokens/s"),
            "total_token_rate": rate(lambda bucket: bucket.prompt_tokens + bucket.output_tokens, "tokens/s"),
            "request_rate": rate(lambda bucket: bucket.completed, "queries/s"),
        }
    }


# values


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that have a value: BR0.2's optional fields are left out rather than null."""
    return {name: value for name, value in fields.items() if value is not None}


def _config_id(config: Any) -> str:
    """BR0.2's cfg_id: a hash of the configuration, the same for the same settings."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _timestamp(unix_seconds: float) -> str:
    return datetime.fromtimestamp(unix_seconds, tz=UTC).isoformat()


def _iso_duration(seconds: float) -> str:
    """ISO 8601, e.g. PT12.5S (never an exponent, which the format has not)."""
    return f"PT{f'{seconds:.6f}'.rstrip('0').rstrip('.')}S"


def _number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)
