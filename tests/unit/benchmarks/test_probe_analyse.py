"""The probe's figures from its records: step times, and CPU per process and thread inside the window only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.vs_guidellm.probe.analyse import analyse


def _write(directory: Path, record: dict[str, Any]) -> None:
    base = {"ppid": 1, "calls": [], "frontend_steps": 0, "core_calls": [], "core_steps": 0, "title": ""}
    (directory / f"{record['pid']}.json").write_text(json.dumps({**base, **record}))


def test_step_times_and_cpu_per_process_and_thread_count_the_window_only(tmp_path: Path) -> None:
    # The caller calls vLLM from t=10 to t=20; the engine core steps 4 times (1, 1, 2 and 4 ms).
    _write(
        tmp_path,
        {
            "pid": 100,
            "calls": [[10.0, 20.0]],
            "cpu": [[0.0, 0.0, 0.0, 0.0], [10.0, 1.0, 0.5, 0.0], [20.0, 3.0, 1.0, 0.1], [30.0, 9.0, 1.0, 0.1]],
            "threads": [
                [0.0, {"100": ["MainThread", 0.0], "101": ["batchmark-receiver", 0.0]}],
                [10.0, {"100": ["MainThread", 1.0], "101": ["batchmark-receiver", 0.0]}],
                # the receiver ended before t=20: its last reading holds
                [20.0, {"100": ["MainThread", 2.0]}],
                [30.0, {"100": ["MainThread", 8.0]}],
            ],
        },
    )
    steps = [[11.0, 11.001], [12.0, 12.001], [13.0, 13.002], [14.0, 14.004]]
    _write(
        tmp_path,
        {
            "pid": 200,
            "ppid": 100,
            "title": "VLLM::EngineCore",
            "core_calls": steps,
            "core_steps": 4,
            "cpu": [[0.0, 0.0, 0.0, 0.0], [10.0, 2.0, 0.0, 0.0], [20.0, 12.0, 0.0, 0.0]],
            "threads": [[0.0, {"200": ["MainThread", 0.0]}], [20.0, {"200": ["MainThread", 12.0]}]],
        },
    )
    figures = analyse(tmp_path)
    assert figures["core_step_seconds_mean"] == pytest.approx(0.002)
    assert figures["core_step_seconds_median"] == pytest.approx(0.002)
    by_pid = {row["pid"]: row for row in figures["cpu_by_process"]}
    assert by_pid[100]["role"] == "vLLM caller"
    assert by_pid[100]["cpu_seconds"] == pytest.approx(2.0 - 0.1)  # the probe's own CPU left out
    assert by_pid[100]["threads"] == {"MainThread": pytest.approx(1.0), "batchmark-receiver": 0.0}
    assert by_pid[200]["role"] == "VLLM::EngineCore"
    assert by_pid[200]["cpu_seconds"] == pytest.approx(10.0)
    assert figures["harness_cpu_seconds"] == pytest.approx(2.0 - 0.5 - 0.1)
