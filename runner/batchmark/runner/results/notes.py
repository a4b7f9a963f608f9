"""The lines printed under a report's tables, on the console and in the HTML report alike: load time, the
sweep's time against its timed phases, the search, the recommendation."""

from __future__ import annotations

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
    if report.engine.details.get("engine_stats") is False:
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
    if report.repeats_warning is not None:
        notes.append(report.repeats_warning)
    if report.recommendation is not None:
        notes.append(report.recommendation.statement)
    return notes
