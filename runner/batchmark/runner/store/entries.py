"""A stored run's index entry: what `batchmark history` lists and filters on, without opening the run."""

from __future__ import annotations

import datetime

from pydantic import BaseModel, ConfigDict, Field

from batchmark.runner.results.fingerprint import Fingerprint, fingerprint
from batchmark.runner.results.report import BenchmarkResult, RunReport


class StoredRun(BaseModel):
    """One run in the store's index."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(description="The run's unique id.")
    name: str = Field(description="The benchmark's name.")
    created_at: str = Field(description="When the run started, ISO 8601.")
    stored_at: str = Field(description="When it was stored, ISO 8601.")
    folder: str = Field(description="The run's folder in the store, relative to the store's root.")
    model: str = Field(description="The model it loaded.")
    engine: str = Field(description="The engine kind (vllm, simulated).")
    simulated: bool = Field(description="True when its timings come from the simulated engine's model.")
    engine_version: str | None = Field(description="vLLM's version, where vLLM ran.")
    batchmark_version: str = Field(description="batchmark's version.")
    gpu_name: str | None = Field(description="The device it ran on (the modelled one when simulated).")
    gpus: int = Field(description="GPUs its engines occupied.")
    complete: bool = Field(description="False when the run was cut short.")
    benchmarks: int = Field(description="Benchmarks it ran.")
    repeats: int = Field(description="Times each benchmark was measured.")
    strategy: str | None = Field(description="The headline benchmark: the recommended one, else the fastest.")
    output_tokens_per_second: float | None = Field(description="The headline benchmark's output throughput.")
    output_tokens_per_second_low: float | None = Field(description="Lower end of its 95% interval (repeats).")
    output_tokens_per_second_high: float | None = Field(description="Upper end of its 95% interval (repeats).")
    requests_per_second: float | None = Field(description="The headline benchmark's request throughput.")
    fingerprint: Fingerprint = Field(description="Its workload and stack: runs with equal keys are comparable.")

    @property
    def started(self) -> datetime.datetime:
        """When the run started, in UTC."""
        return utc(self.created_at)


def utc(timestamp: str) -> datetime.datetime:
    """An ISO 8601 time as UTC (one without a zone is taken as UTC)."""
    moment = datetime.datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def stored_run(report: RunReport, folder: str, stored_at: str, printed: Fingerprint | None = None) -> StoredRun:
    """The index entry of ``report`` stored in ``folder`` (``printed``: its fingerprint, where already made)."""
    printed = printed or fingerprint(report)
    headline = _headline(report)
    low = high = None
    output = headline.throughput.output_tokens_per_second if headline is not None else None
    requests = headline.throughput.requests_per_second if headline is not None else None
    strategy = headline.strategy if headline is not None else None
    repeated = report.repeated or []
    chosen = report.recommendation.repeated if report.recommendation is not None else None
    if repeated:
        entry = repeated[chosen] if chosen is not None else max(repeated, key=lambda r: r.output_tokens_per_second.mean)
        output, requests, strategy = entry.output_tokens_per_second.mean, entry.requests_per_second.mean, entry.strategy
        low, high = entry.output_tokens_per_second.low, entry.output_tokens_per_second.high
    return StoredRun(
        run_id=report.run_id,
        name=report.name,
        created_at=report.created_at,
        stored_at=stored_at,
        folder=folder,
        model=report.engine.model,
        engine=report.engine.kind,
        simulated=report.engine.simulated,
        engine_version=report.engine.version,
        batchmark_version=report.batchmark_version,
        gpu_name=report.engine.gpu_name,
        gpus=int(printed.workload["hardware"]["gpus"]),
        complete=report.complete,
        benchmarks=len(report.benchmarks),
        repeats=report.repeats,
        strategy=strategy,
        output_tokens_per_second=output,
        output_tokens_per_second_low=low,
        output_tokens_per_second_high=high,
        requests_per_second=requests,
        fingerprint=printed,
    )


def _headline(report: RunReport) -> BenchmarkResult | None:
    chosen = report.recommendation.benchmark if report.recommendation is not None else None
    if chosen is not None and 0 <= chosen < len(report.benchmarks):
        return report.benchmarks[chosen]
    return max(report.benchmarks, key=lambda b: b.throughput.output_tokens_per_second, default=None)
