"""The fields of a BatchBenchmark's status that the runner writes, as models, the summary of a run that its
pod's termination message carries (from which the operator fills those fields when the runner could not), and the
operator's field the runner reads back (runnerImage: its own image, which it cannot learn in its pod).

Half of the operator–runner contract (batchmark.runner.contract names the fields and who writes each): the
operator reads and validates these, so they import no more than pydantic; building them from a run's full
report is batchmark.runner.results.summary's.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class SummaryModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, frozen=True
    )


class RequestTotals(SummaryModel):
    """Request counts of one benchmark."""

    completed: int = Field(description="Requests that finished successfully inside the measured window.")
    errored: int = Field(description="Requests that failed inside the measured window.")
    incomplete: int = Field(default=0, description="Requests still in flight when the benchmark stopped.")


class BenchmarkSummary(SummaryModel):
    """One benchmark's headline figures; every figure but the strategy may be left out to save space."""

    strategy: str = Field(description="Strategy label, e.g. throughput x512 or constant@5/s.")
    stop_reason: str | None = Field(default=None, description="Which constraint (or signal) ended the benchmark.")
    requests: RequestTotals | None = Field(default=None, description="Request counts.")
    requests_per_second: float | None = Field(default=None, description="Completed requests per second.")
    output_tokens_per_second: float | None = Field(default=None, description="Generated tokens per second.")
    prompt_tokens_per_second: float | None = Field(default=None, description="Prompt tokens per second.")
    total_tokens_per_second: float | None = Field(default=None, description="Prompt and generated tokens per second.")
    latency_p50_seconds: float | None = Field(default=None, description="Median request latency, seconds.")
    latency_p90_seconds: float | None = Field(default=None, description="90th percentile request latency, seconds.")
    latency_p99_seconds: float | None = Field(default=None, description="99th percentile request latency, seconds.")
    ttft_p50_seconds: float | None = Field(default=None, description="Median time to first token, seconds.")
    ttft_p99_seconds: float | None = Field(default=None, description="99th percentile time to first token, seconds.")
    tpot_p50_seconds: float | None = Field(default=None, description="Median time per output token, seconds.")
    itl_p50_seconds: float | None = Field(
        default=None, description="Median interval between two output tokens on the stream (async backend), seconds."
    )
    itl_p99_seconds: float | None = Field(
        default=None,
        description="99th percentile interval between two output tokens on the stream (async backend), seconds.",
    )
    mean_batch_size: float | None = Field(default=None, description="Mean effective batch size.")
    engine_utilization: float | None = Field(
        default=None, description="Share of the measured window the engine was busy, 0 to 1."
    )
    replicas: int | None = Field(
        default=None, description="Engine replicas whose sum the figures are (left out with one engine)."
    )
    straggler_ratio: float | None = Field(
        default=None,
        description="With several replicas: the fastest one's output tokens per second over the slowest's (1: even).",
    )
    swept: dict[str, Any] | None = Field(
        default=None, description="Values of the swept backend fields this benchmark ran with (a sweep only)."
    )
    batch_size: int | None = Field(default=None, description="The backend's batch_size for this benchmark.")
    repeat: int | None = Field(default=None, description="With repeats: which repeat of its point this is, from 0.")
    slo_met: bool | None = Field(default=None, description="Whether it met every target of the latency budget.")
    goodput_requests_per_second: float | None = Field(
        default=None, description="Requests per second that met every per-request target of the budget."
    )
    goodput_output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second of the requests that met every per-request target."
    )
    cost_per_million_output_tokens: float | None = Field(
        default=None, description="Cost of a million generated tokens at the given GPU price."
    )
    cost_per_million_total_tokens: float | None = Field(
        default=None, description="Cost of a million prompt and generated tokens at the given GPU price."
    )


class EngineStatus(SummaryModel):
    """The engine that ran."""

    kind: str = Field(description="vllm or simulated.")
    simulated: bool = Field(description="True when timings come from the simulated engine's model, not a GPU.")
    model: str = Field(description="Model loaded.")
    version: str | None = Field(default=None, description="vLLM version, where vLLM ran.")
    gpu_name: str | None = Field(default=None, description="Device name (the modelled one when simulated).")
    load_seconds: float | None = Field(default=None, description="Engine load time, outside every timed phase.")


class Interval(SummaryModel):
    """A figure over repeats: mean and its 95% confidence interval."""

    mean: float = Field(description="Mean over the repeats.")
    low: float | None = Field(default=None, description="Lower end of the 95% confidence interval.")
    high: float | None = Field(default=None, description="Upper end of the 95% confidence interval.")
    repeats: int = Field(description="Repeats it is computed from.")


class RunSummary(SummaryModel):
    """What the runner leaves in its termination message: enough to fill the status without the API server."""

    run_id: str = Field(description="Unique id of the run.")
    complete: bool = Field(description="False when the run was interrupted before its end.")
    stop_reason: str | None = Field(
        default=None,
        description="Why an interrupted run ended (the engine failed, a signal); none when it completed.",
    )
    engine: EngineStatus | None = Field(default=None, description="The engine that ran.")
    results: list[BenchmarkSummary] = Field(description="One entry per benchmark, in run order.")
    omitted_benchmarks: int = Field(
        default=0, description="Benchmarks left out to fit the termination message (the results ConfigMap has all)."
    )
    recommended: int | None = Field(
        default=None,
        description="Index in the full report of the recommended benchmark (highest output tokens/s within budget).",
    )
    recommendation: str | None = Field(default=None, description="The recommendation, or why there is none.")
    recommended_output_tokens_per_second: Interval | None = Field(
        default=None, description="With repeats: the recommended benchmark's output tokens/s over its repeats."
    )
    certainty: str | None = Field(
        default=None, description="With repeats: distinguishable, tied or unknown against the runner-up."
    )
    output_failure: str | None = Field(
        default=None,
        description="What could not be written once the run had ended (the results store, an output file): the"
        " results themselves are in the status.",
    )


def parse_summary(text: str) -> RunSummary | None:
    """A termination message read back, or None when it is not a summary (e.g. the log tail of a crash)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    try:
        return RunSummary.model_validate(data)
    except ValueError:
        return None


class ProgressStatus(SummaryModel):
    """The run in progress, as the runner last reported it (a few seconds apart)."""

    pod_name: str | None = Field(default=None, description="The pod reporting: its engine is loaded.")
    benchmark: int = Field(default=0, description="Which benchmark of the run is going, from 1 (0: none yet).")
    benchmarks: int = Field(default=0, description="Benchmarks known so far (a sweep adds rates after the second).")
    strategy: str | None = Field(default=None, description="The current benchmark's strategy label.")
    requests_completed: int = Field(default=0, description="Requests of the current benchmark completed so far.")
    requests_errored: int = Field(default=0, description="Requests of the current benchmark failed so far.")
    elapsed_seconds: float = Field(default=0.0, description="Seconds since the current benchmark started.")
    output_tokens_per_second: float = Field(
        default=0.0, description="Output tokens per second so far in the current benchmark."
    )


class Headline(SummaryModel):
    """The figures kubectl get shows: the run's recommended benchmark, or the one with the highest output
    throughput when the run recommends none."""

    strategy: str = Field(description="Which benchmark of the run.")
    batch_size: int | None = Field(
        default=None, description="The micro-batch size it ran with (differs per sweep point)."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Generated tokens per second (with repeats: the mean over them)."
    )
    output_tokens_per_second_low: float | None = Field(
        default=None, description="With repeats: lower end of the output tokens/s 95% confidence interval."
    )
    output_tokens_per_second_high: float | None = Field(
        default=None, description="With repeats: upper end of the output tokens/s 95% confidence interval."
    )
    repeats: int | None = Field(default=None, description="With repeats: how many the figures come from.")
    certainty: str | None = Field(
        default=None, description="With repeats: distinguishable, tied or unknown against the runner-up."
    )
    requests_per_second: float | None = Field(default=None, description="Completed requests per second.")
    latency_p50_seconds: float | None = Field(default=None, description="Median request latency, seconds.")
    latency_p99_seconds: float | None = Field(default=None, description="99th percentile request latency, seconds.")


class RegressionStatus(SummaryModel):
    """The run against its baseline (spec.baseline); the operator's Regressed condition says the same."""

    verdict: Literal["True", "False", "Unknown"] = Field(
        description="True: its output tokens/s fell significantly (Welch's t-test on the repeats) and by more than"
        " the threshold; False: not; Unknown: no verdict (no repeats, no baseline of its workload)."
    )
    baseline: str | None = Field(default=None, description="The baseline's run id in the results store.")
    change: float | None = Field(
        default=None, description="The benchmark that fell most: its output tokens/s against the baseline's, minus 1."
    )
    change_low: float | None = Field(default=None, description="Lower end of that change's 95% interval.")
    change_high: float | None = Field(default=None, description="Upper end of that change's 95% interval.")
    p_value: float | None = Field(default=None, description="Welch's t-test's p-value for that benchmark.")
    threshold: float = Field(description="The smallest drop called a regression (0.05: 5%).")
    reason: str = Field(description="The verdict in one sentence.")


# An image's digest as a container runtime reports it in imageID: alone (containerd's image ID, sha256:...), after
# the image's name (NAME@sha256:..., a digest of the registry's) or after docker's scheme (docker://sha256:...).
_IMAGE_DIGEST = re.compile(r"(?:^|[@/])(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")


class RunnerImageStatus(SummaryModel):
    """The image the runner container of the benchmark's current pod runs, as its kubelet reports it. The runner
    cannot learn its own image's digest in its pod (the downward API has none): the operator writes it here from
    the pod's status, and the runner reads it back into its report."""

    image: str = Field(description="The image, as the kubelet reports it (the container status's image).")
    image_id: str = Field(
        alias="imageID",
        description="The image's ID, as the container runtime reports it (the container status's imageID): its"
        " digest, alone (sha256:...) or after the image's name (NAME@sha256:...).",
    )
    pod_name: str = Field(description="The pod whose runner container reported it.")

    @property
    def digest(self) -> str | None:
        """The digest in imageID (sha256:...), or None where it holds none."""
        found = _IMAGE_DIGEST.search(self.image_id)
        return found.group(1) if found else None


def headline(summary: RunSummary) -> Headline | None:
    """The recommended benchmark (under the latency budget, when the run has one), else the one with the highest
    output throughput; None for a run of no benchmark."""
    results = summary.results
    if not results:
        return None
    # The index is into the full report: it names an entry here only when none was left out to fit.
    recommended = summary.recommended
    if recommended is not None and summary.omitted_benchmarks == 0 and 0 <= recommended < len(results):
        best = results[recommended]
    else:
        best = max(results, key=lambda result: result.output_tokens_per_second or 0.0)
    shown = recommended is not None and summary.omitted_benchmarks == 0 and 0 <= recommended < len(results)
    interval = summary.recommended_output_tokens_per_second if shown else None
    return Headline(
        strategy=best.strategy,
        batch_size=best.batch_size,
        output_tokens_per_second=interval.mean if interval is not None else best.output_tokens_per_second,
        output_tokens_per_second_low=interval.low if interval is not None else None,
        output_tokens_per_second_high=interval.high if interval is not None else None,
        repeats=interval.repeats if interval is not None else None,
        certainty=summary.certainty if interval is not None else None,
        requests_per_second=best.requests_per_second,
        latency_p50_seconds=best.latency_p50_seconds,
        latency_p99_seconds=best.latency_p99_seconds,
    )
