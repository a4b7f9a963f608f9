"""The lines printed with a report's tables, on the console and in the HTML report alike: which data ran;
load time, the sweep's time against its timed phases, the search, the recommendation."""

from __future__ import annotations

from batchmark.runner.config.backend import STREAM_DISPATCH
from batchmark.runner.results.report import RunReport

ENGINE_STATS_OFF = (
    "TTFT and TPOT not measured: vLLM's per-request stats were off, as vllm.LLM runs by default (they cost the"
    " process calling vLLM about 1 ms of CPU per request); backend.vllm_config.disable_log_stats=false, or an"
    " SLO on ttft or tpot, turns them on"
)


def run_notes(report: RunReport) -> list[str]:
    """The lines under the tables: load time, the sweep's time against its timed phases, the recommendation."""
    if report.engine.loaded:
        notes = [f"engine load time {report.engine.load_seconds:.2f} s (not timed)"]
    else:
        notes = [f"the engine had not loaded ({report.engine.load_seconds:.2f} s into loading)"]
    # A streamed run reads TTFT and TPOT on its stream, with or without vLLM's stats.
    if report.engine.details.get("engine_stats") is False and report.dispatch != STREAM_DISPATCH:
        notes.append(ENGINE_STATS_OFF)
    sweep = report.sweep
    if sweep is not None:
        loads = len(sweep.engine_loads)
        reloads = (
            f"; the engine was reloaded {loads - 1} times ({sweep.load_seconds:.2f} s, not timed)"
            if loads > 1
            else "; one engine load for every point"
        )
        share = sweep.timed_seconds / sweep.wall_seconds if sweep.wall_seconds > 0 else 0.0
        notes.append(
            f"sweep of {sweep.points} points over {', '.join(sweep.fields)}: {sweep.wall_seconds:.2f} s in all, "
            f"{sweep.timed_seconds:.2f} s of it timed ({share:.0%}){reloads}"
        )
    if sweep is not None and sweep.search is not None:
        found = f"best {sweep.search.best}" if sweep.search.best is not None else "none met the budget"
        notes.append(
            f"batch-size search: measured {len(sweep.search.visited)} of {len(sweep.search.candidates)} candidates"
            f" ({', '.join(map(str, sweep.search.visited))}), {found}; {sweep.search.method}"
        )
    notes.extend(_saturation_notes(report))
    if report.repeats_warning is not None:
        notes.append(report.repeats_warning)
    if report.recommendation is not None:
        notes.append(report.recommendation.statement)
    return notes


def _saturation_notes(report: RunReport) -> list[str]:
    """One line per benchmark the over_saturation constraint stopped, with the test that stopped it."""
    notes = []
    sweep = report.config.get("profile", {}).get("kind") == "sweep"
    for benchmark in report.benchmarks:
        check = benchmark.saturation
        if check is None or not check.saturated:
            continue
        notes.append(
            f"{benchmark.strategy}: the engine could not keep up, stopped after {benchmark.duration:.1f} s: requests"
            f" in flight rose from {check.in_flight_first:.1f} to {check.in_flight_last:.1f} over the last"
            f" {check.window_seconds:g} s (Kendall's tau {check.in_flight_tau:.2f}, p {check.in_flight_p:.2g}; their"
            f" latency's tau {check.latency_tau:.2f}, p {check.latency_p:.2g}; both under {check.significance:g})"
            + ("; the sweep's higher rates were not run" if sweep else "")
        )
    return notes


def data_note(report: RunReport) -> str | None:
    """Which data ran: its kind and source, the samples, the records read and those left out, its content hash.
    None for results written before the report said."""
    data = report.data
    if data is None:
        return None
    source = f" {data.source}" if data.source else ""
    samples = f"{data.samples:,} sample{'' if data.samples == 1 else 's'}"
    if data.records_read is not None:
        samples += f" from {data.records_read:,} record{'' if data.records_read == 1 else 's'} read"
    dropped = []
    if data.skipped_too_long:
        setting = report.config.get("data", {}).get("too_long")
        why = f" (too_long={setting})" if setting else ""
        dropped.append(f"{data.skipped_too_long:,} dropped as longer than the model's context{why}")
    if data.skipped_without_answer:
        dropped.append(f"{data.skipped_without_answer:,} dropped without an answer")
    parts = [f"data: {data.kind}{source}", samples, *dropped]
    if data.content_hash:
        parts.append(f"content sha256 {data.content_hash}")
    return ", ".join(parts)
