#!/usr/bin/env python
"""`batchmark history` over a results store of many runs: the time from the command's start to its last line.

One real run is stored (the simulated engine at zero cost); its index entry is then copied N - 1 times with new
run ids and start times, as N runs stored over N minutes would leave it (the run folders are not copied: `history`
reads only the index). Each repeat runs `batchmark history --store DIR --format json` (and `--format table`) as a
program, as a user does, so the figures include Python's start and batchmark's imports.

    .venv/bin/python benchmarks/store_history.py --runs 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = [
    "run",
    "--quiet",
    "--backend",
    "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,engine=simulated,simulation.time_scale=0",
    "--data",
    "kind=synthetic_text,prompt_tokens=64,output_tokens=16",
    "--profile",
    "kind=throughput",
    "--constraint",
    "kind=max_requests,count=32",
]


def batchmark(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "batchmark.runner", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def fill(store: Path, runs: int) -> None:
    batchmark(*RUN, "--store", str(store))
    (entry_path,) = (store / "index").glob("*.json")
    entry = json.loads(entry_path.read_text())
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for number in range(1, runs):
        moment = start + datetime.timedelta(minutes=number)
        run_id = f"{number:012x}"
        entry.update(run_id=run_id, created_at=moment.isoformat(), stored_at=moment.isoformat(timespec="microseconds"))
        (store / "index" / f"{moment:%Y%m%dT%H%M%SZ}-{run_id}.json").write_text(json.dumps(entry) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="batchmark-history-") as folder:
        store = Path(folder)
        fill(store, options.runs)
        print(f"{options.runs} runs in {store}; load {os.getloadavg()[0]:.1f}")
        baseline = [batchmark("--version") for _ in range(options.repeat)]
        for label, args in (
            ("json", ["--format", "json"]),
            ("table, last 20", ["--last", "20"]),
            ("json, one model of all", ["--format", "json", "--model", "Qwen/*"]),
        ):
            times = [batchmark("history", "--store", str(store), *args) for _ in range(options.repeat)]
            print(
                f"history {label}: median {statistics.median(times):.2f} s [{min(times):.2f}-{max(times):.2f}]"
                f" of {options.repeat}"
            )
        print(f"(batchmark --version alone: median {statistics.median(baseline):.2f} s)")
        print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
