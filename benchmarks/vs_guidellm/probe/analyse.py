"""Figures from one tool run's probe records (see sitecustomize.py): the same arithmetic for every tool.

* window: from the start of the first engine call (``LLM.generate`` or ``LLMEngine.step``) to the end of the
  last, in the process that calls vLLM's API;
* busy_fraction: the share of the window inside those calls (their union);
* core_busy_fraction: the share of the window in which vLLM's engine core was running a model step, wherever
  it runs (the truth in vLLM's default multiprocessing mode, where the core steps on while the caller is busy
  elsewhere);
* steps: engine-core steps that ran the model (the simulated stand-in: its ``step()`` calls);
* harness_cpu_seconds: CPU seconds within the window of every process of the tool, less vLLM's share (its
  calls, its own threads, its engine-core process and that process's children) and less the probe's own.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any


def _union(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    total = 0.0
    reach = low
    for start, end in sorted(intervals):
        begin, finish = max(start, reach), min(end, high)
        if finish > begin:
            total += finish - begin
            reach = finish
    return total


def _at(samples: list[list[float]], when: float) -> list[float]:
    """The sample's values linearly interpolated at ``when`` (clamped to the first and last sample)."""
    times = [sample[0] for sample in samples]
    index = bisect.bisect_left(times, when)
    if index == 0:
        return samples[0][1:]
    if index >= len(samples):
        return samples[-1][1:]
    before, after = samples[index - 1], samples[index]
    share = (when - before[0]) / (after[0] - before[0]) if after[0] > before[0] else 0.0
    return [low + share * (high - low) for low, high in zip(before[1:], after[1:], strict=True)]


def load(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(directory.glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return records


def pids(directory: Path) -> set[int]:
    """Every process a run started (a Python one): for cleaning up what it leaves behind."""
    return {int(path.stem) for path in directory.glob("*.json")}


def analyse(directory: Path) -> dict[str, Any]:
    records = load(directory)
    callers = [record for record in records if record["calls"]]
    if not callers:
        raise RuntimeError(f"no process in {directory} called vLLM")
    calls = [tuple(call) for record in callers for call in record["calls"]]
    low = min(start for start, _ in calls)
    high = max(end for _, end in calls)
    window = high - low
    core_calls = [tuple(call) for record in records for call in record["core_calls"]]
    core_steps = sum(record["core_steps"] for record in records)
    frontend_steps = sum(record["frontend_steps"] for record in records)
    # Engine processes: an engine core of its own (it steps but nobody calls the API in it), and its children.
    by_pid = {record["pid"]: record for record in records}
    engine = {record["pid"] for record in records if record["core_steps"] and not record["calls"]}
    changed = True
    while changed:
        changed = False
        for record in records:
            if record["pid"] not in engine and record["ppid"] in engine:
                engine.add(record["pid"])
                changed = True
    harness = 0.0
    for pid, record in by_pid.items():
        if pid in engine or not record["cpu"]:
            continue
        cpu, engine_cpu, probe = _window_cpu(record, low, high)
        harness += max(0.0, cpu - engine_cpu - probe)
    durations = sorted(end - start for start, end in core_calls)
    return {
        "core_step_seconds_mean": sum(durations) / len(durations) if durations else None,
        "core_step_seconds_median": durations[len(durations) // 2] if durations else None,
        "cpu_by_process": _cpu_by_process(records, engine, low, high),
        "window_seconds": window,
        "busy_fraction": _union(calls, low, high) / window if window > 0 else None,
        "core_busy_fraction": _union(core_calls, low, high) / window if window > 0 and core_calls else None,
        "steps": core_steps or frontend_steps,
        "frontend_steps": frontend_steps,
        "harness_cpu_seconds": harness,
        "processes": len(records),
        "engine_processes": len(engine),
    }


def _window_cpu(record: dict[str, Any], low: float, high: float) -> tuple[float, float, float]:
    """The process's CPU seconds within [low, high]: all of it, vLLM's share of it, the probe's own."""
    start, end = _at(record["cpu"], low), _at(record["cpu"], high)
    cpu, engine_cpu, probe = (b - a for a, b in zip(start, end, strict=True))
    return cpu, engine_cpu, probe


def _role(record: dict[str, Any], engine: set[int]) -> str:
    """What a process is to the run: the engine core, the process calling vLLM's API, or another of the tool's."""
    title = record.get("title") or ""
    if record["pid"] in engine:
        return title if title.startswith("VLLM::") else "engine core"
    if record["calls"]:
        return "vLLM caller"
    return "tool's other process"


def _thread_cpu(samples: list[list[Any]], low: float, high: float) -> dict[str, float]:
    """CPU seconds of each thread name within [low, high], from the per-second per-thread samples (a thread
    absent from a sample had used none yet, or had ended: its last reading holds)."""
    if not samples:
        return {}
    tids = {tid for _, threads in samples for tid in threads}
    used: dict[str, float] = {}
    for tid in tids:
        series = []
        last = 0.0
        name = ""
        for when, threads in samples:
            if tid in threads:
                name, last = threads[tid]
            series.append([when, last])
        start, end = _at(series, low)[0], _at(series, high)[0]
        used[name] = used.get(name, 0.0) + max(0.0, end - start)
    return used


def _cpu_by_process(records: list[dict[str, Any]], engine: set[int], low: float, high: float) -> list[dict[str, Any]]:
    """CPU seconds per process within the window (the probe's own removed), and per thread name."""
    rows = []
    for record in records:
        if not record["cpu"]:
            continue
        cpu, _, probe = _window_cpu(record, low, high)
        threads = _thread_cpu(record.get("threads", []), low, high)
        threads.pop("batchmark-probe", None)
        rows.append(
            {
                "pid": record["pid"],
                "role": _role(record, engine),
                "cpu_seconds": max(0.0, cpu - probe),
                "threads": dict(sorted(threads.items(), key=lambda item: -item[1])),
            }
        )
    return sorted(rows, key=lambda row: -row["cpu_seconds"])
