"""`batchmark compare` on runs with repeats: per figure, different by the recommendation's test or within noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchmark.runner.cli import main

pytestmark = pytest.mark.integration


def run(tmp_path: Path, name: str, step_fixed: float, repeats: int = 3) -> Path:
    output = tmp_path / f"{name}.json"
    code = main(
        [
            "run",
            "--quiet",
            "--backend",
            "kind=vllm_python_batch,model=m,engine=simulated,batch_size=16,batch_timeout=0.005,"
            f"simulation.time_scale=0.2,simulation.step_fixed_seconds={step_fixed}",
            "--data",
            "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
            "--profile",
            "kind=throughput,max_concurrency=32",
            "--constraint",
            "kind=max_requests,count=64",
            "--repeats",
            str(repeats),
            "--output",
            str(output),
        ]
    )
    assert code == 0
    return output


def test_compare_says_per_figure_whether_two_runs_differ_beyond_their_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = run(tmp_path, "fast", 0.004)
    slow = run(tmp_path, "slow", 0.02)  # every step five times as long: far beyond any interval
    capsys.readouterr()
    assert main(["compare", str(fast), str(slow)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "against" in line]
    throughput = next(line for line in lines if ", output_tokens_per_second:" in line)
    assert "differs (-" in throughput
    # The recommendation's rule, not the intervals' overlap: Welch's t-test at 0.05 on the repeats.
    assert "Welch's t-test p=" in throughput
    assert "< 0.05)" in throughput
    assert any("request_latency_p99" in line for line in lines)
    # A run against itself: no figure differs from its own.
    assert main(["compare", str(fast), str(fast)]) == 0
    same = [line for line in capsys.readouterr().out.splitlines() if "against" in line]
    assert same
    assert all("within noise (Welch's t-test p=1 >= 0.05)" in line for line in same)


def test_compare_without_repeats_says_there_are_no_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    once = run(tmp_path, "once", 0.004, repeats=1)
    repeated = run(tmp_path, "repeated", 0.004)
    capsys.readouterr()
    assert main(["compare", str(once), str(repeated)]) == 0
    assert "no intervals to compare (run both with --repeats 2 or more)" in capsys.readouterr().out
