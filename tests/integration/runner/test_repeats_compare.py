"""`batchmark compare` on runs with repeats: per figure, different by the recommendation's test or within noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import run_and_load, run_in_process
from tests.integration.runner.harness import stepped_options

pytestmark = pytest.mark.integration


def results_file(tmp_path: Path, name: str, step_fixed: float, repeats: int = 3) -> Path:
    """A run whose every engine step takes ``step_fixed`` seconds and more, repeated; its JSON results."""
    output = tmp_path / f"{name}.json"
    run_and_load(output, stepped_options(step_fixed, "--repeats", str(repeats), time_scale=0.2), in_process=True)
    return output


def compare(first: Path, second: Path) -> list[str]:
    """`batchmark compare`'s lines that set one run's figure against the other's."""
    finished = run_in_process(["compare", str(first), str(second)])
    assert finished.code == 0, finished.stderr
    return [line for line in finished.stdout.splitlines() if "against" in line]


def test_compare_says_per_figure_whether_two_runs_differ_beyond_their_intervals(tmp_path: Path) -> None:
    fast = results_file(tmp_path, "fast", 0.004)
    slow = results_file(tmp_path, "slow", 0.02)  # every step five times as long: far beyond any interval
    lines = compare(fast, slow)
    throughput = next(line for line in lines if ", output_tokens_per_second:" in line)
    assert "differs (-" in throughput
    # The recommendation's rule, not the intervals' overlap: Welch's t-test at 0.05 on the repeats.
    assert "Welch's t-test p=" in throughput
    assert "< 0.05)" in throughput
    assert any("request_latency_p99" in line for line in lines)
    # A run against itself: no figure differs from its own.
    same = compare(fast, fast)
    assert same
    assert all("within noise (Welch's t-test p=1 >= 0.05)" in line for line in same)


def test_compare_without_repeats_says_there_are_no_intervals(tmp_path: Path) -> None:
    once = results_file(tmp_path, "once", 0.004, repeats=1)
    repeated = results_file(tmp_path, "repeated", 0.004)
    finished = run_in_process(["compare", str(once), str(repeated)])
    assert finished.code == 0, finished.stderr
    assert "no intervals to compare (run both with --repeats 2 or more)" in finished.stdout
