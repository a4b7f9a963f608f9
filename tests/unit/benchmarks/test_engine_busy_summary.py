"""The side-by-side benchmark's summary: wall-clock ratios are taken within a round, never across rounds."""

from __future__ import annotations

from typing import Any

from benchmarks.vs_guidellm.engine_busy import rotated, running_order, same_round_ratios, summarise, window_split
from benchmarks.vs_guidellm.run import OUTPUT_TOKENS


def _run(tokens_per_second: float, load: tuple[float, float]) -> dict[str, Any]:
    return {
        "busy": 0.99,
        "core_busy": 0.99,
        "steps_per_1000_requests": 4000.0,
        "harness_cpu_per_request": 0.001,
        "output_tokens_per_second": tokens_per_second,
        "processes_left_behind": 0,
        "load_average": list(load),
    }


def test_ratios_pair_each_round_with_itself() -> None:
    # A slow round (the machine busy) and a fast one: each ratio is 2 although the figures differ 10x.
    rounds = [
        {"guidellm": _run(100.0, (1, 2)), "batchmark_batch": _run(200.0, (2, 3)), "load_average": 1.0},
        {"guidellm": _run(1000.0, (5, 6)), "batchmark_batch": _run(2000.0, (6, 7)), "load_average": 5.0},
    ]
    assert same_round_ratios(rounds, "batchmark_batch", "guidellm", "output_tokens_per_second") == [2.0, 2.0]


def test_a_round_without_the_reference_gives_no_ratio() -> None:
    rounds = [
        {"batchmark_batch": _run(200.0, (1, 1))},
        {"guidellm": _run(0.0, (1, 1)), "batchmark_batch": _run(1.0, (1, 1))},
    ]
    assert same_round_ratios(rounds, "batchmark_batch", "guidellm", "output_tokens_per_second") == []


def test_summary_spreads_the_ratio_and_every_run_load() -> None:
    entry: dict[str, Any] = {
        "rounds": [
            {"guidellm": _run(100.0, (1, 2)), "batchmark_batch": _run(150.0, (3, 4))},
            {"guidellm": _run(1000.0, (5, 6)), "batchmark_batch": _run(2000.0, (7, 8))},
        ]
    }
    summarise(entry, ["guidellm", "batchmark_batch"])
    batch = entry["summary"]["batchmark_batch"]
    assert batch["throughput_over_guidellm"] == {"median": 1.75, "min": 1.5, "max": 2.0}
    assert batch["load_average"] == {"median": 5.5, "min": 3, "max": 8}
    assert "throughput_over_guidellm" not in entry["summary"]["guidellm"]


def test_who_runs_first_changes_every_round() -> None:
    tools = ["guidellm", "batchmark_batch", "batchmark_continuous"]
    assert [rotated(tools, index)[0] for index in range(4)] == [*tools, "guidellm"]
    assert rotated(["default", "inprocess"], 1) == ["inprocess", "default"]


def test_no_tool_always_runs_right_after_the_same_other() -> None:
    tools = ["a", "b", "c"]
    orders = [running_order(tools, index) for index in range(4)]
    assert orders == [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"], ["a", "c", "b"]]
    followers = {tool: {order[order.index(tool) + 1] for order in orders if order[-1] != tool} for tool in tools}
    assert all(len(after) == 2 for after in followers.values())


def test_own_utilisation_is_compared_over_the_probes_window_and_the_start_apart() -> None:
    # 256 requests of OUTPUT_TOKENS at 1,000 tok/s: batchmark's window is 256 * OUTPUT_TOKENS / 1000 s.
    measured = 256 * OUTPUT_TOKENS / 1000
    # The engine busy 0.9 s of every second of the probe's window, which starts 2 s after batchmark's.
    window = measured - 2.0
    row = {
        "busy": 0.9,
        "window_seconds": window,
        "own": {"engine_utilization": 0.9 * window / measured, "output_tokens_per_second": 1000.0},
    }
    same, idle = window_split(row, 256)
    assert abs(same) < 1e-12
    assert abs(idle - 2.0) < 1e-9


def test_each_dispatch_mode_is_held_to_its_own_plain_loop_round_by_round() -> None:
    def timed(tokens_per_second: float, step_ms: float) -> dict[str, Any]:
        return {**_run(tokens_per_second, (1, 1)), "core_step_ms_mean": step_ms}

    entry: dict[str, Any] = {
        "rounds": [
            {
                "vllm_chunked": timed(100.0, 10.0),
                "vllm_engine_loop": timed(100.0, 8.0),
                "batchmark_batch": timed(98.0, 10.2),
                "batchmark_continuous": timed(50.0, 16.0),
            },
            {
                "vllm_chunked": timed(1000.0, 1.0),
                "vllm_engine_loop": timed(500.0, 2.0),
                "batchmark_batch": timed(960.0, 1.04),
                "batchmark_continuous": timed(500.0, 2.0),
            },
        ]
    }
    tools = ["vllm_chunked", "vllm_engine_loop", "batchmark_batch", "batchmark_continuous"]
    summarise(entry, tools)
    batch, continuous = entry["summary"]["batchmark_batch"], entry["summary"]["batchmark_continuous"]
    assert batch["throughput_over_reference"] == {"median": 0.97, "min": 0.96, "max": 0.98}
    assert batch["step_time_over_reference"]["max"] == 1.04
    assert continuous["throughput_over_reference"] == {"median": 0.75, "min": 0.5, "max": 1.0}
    assert continuous["step_time_over_reference"]["median"] == 1.5
    assert "throughput_over_reference" not in entry["summary"]["vllm_chunked"]
