#!/usr/bin/env python
"""`batchmark history` over a results store of many runs: the time from the command's start to its last line.

One real run is stored (the simulated engine at zero cost) in a folder store; its index entry is then copied N - 1
times with new run ids and start times, as N runs stored over N minutes would leave it (the run folders are not
copied: `history` reads only the index). Each repeat runs `batchmark history --store DIR --format json` (and
`--format table`) as a program, as a user does, so the figures include Python's start and batchmark's imports.

Then the same N entries are put, loose, in an S3 store on a SeaweedFS server on 127.0.0.1 (devtools/s3server.py;
scripts/setup/seaweedfs.sh builds it): `history` over them as they are (--loose-repeat times), `history --compact`
once, and `history` over the compacted index.

    PYTHONPATH=. .venv/bin/python benchmarks/store_history.py --runs 10000 --repeat 5
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devtools.s3server import s3_server

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


def batchmark(*args: str, environment: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "batchmark.runner", *args],
        check=True,
        capture_output=True,
        env={**os.environ, **(environment or {})},
    )
    return time.perf_counter() - started


def copies(entry: dict[str, object], runs: int) -> Iterator[tuple[str, str]]:
    """Entry names and texts of runs 1 to ``runs`` - 1, started a minute apart."""
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for number in range(1, runs):
        moment = start + datetime.timedelta(minutes=number)
        run_id = f"{number:012x}"
        entry.update(run_id=run_id, created_at=moment.isoformat(), stored_at=moment.isoformat(timespec="microseconds"))
        yield f"{moment:%Y%m%dT%H%M%SZ}-{run_id}.json", json.dumps(entry) + "\n"


def fill(store: Path, runs: int) -> tuple[str, dict[str, object]]:
    """The folder store's N runs; the real run's entry and its name."""
    batchmark(*RUN, "--store", str(store))
    (entry_path,) = (store / "index").glob("*.json")
    entry: dict[str, object] = json.loads(entry_path.read_text())
    for name, text in copies(dict(entry), runs):
        (store / "index" / name).write_text(text)
    return entry_path.name, entry


def timed(label: str, repeat: int, *args: str, environment: dict[str, str] | None = None) -> None:
    times = [batchmark("history", *args, environment=environment) for _ in range(repeat)]
    print(f"{label}: median {statistics.median(times):.2f} s [{min(times):.2f}-{max(times):.2f}] of {repeat}")


def measure_s3(real: tuple[str, dict[str, object]], runs: int, repeat: int, loose_repeat: int) -> None:
    """The same runs' entries put loose in a bucket on a SeaweedFS server here, read before and after compaction."""
    with s3_server(bucket="batchmark-history") as server:
        url = f"s3://{server.bucket}/history"
        environment = {**server.environment(), "AWS_EC2_METADATA_DISABLED": "true"}
        filesystem = server.filesystem()
        name, entry = real
        entries = [(name, json.dumps(entry) + "\n"), *copies(dict(entry), runs)]

        def put(named: tuple[str, str]) -> None:
            with filesystem.open_output_stream(f"{server.bucket}/history/index/{named[0]}") as stream:
                stream.write(named[1].encode())

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(put, entries))
        print(f"{runs} loose entries put in {url} in {time.perf_counter() - started:.1f} s")
        if loose_repeat:
            timed(
                "s3 history json, loose entries",
                loose_repeat,
                "--store",
                url,
                "--format",
                "json",
                environment=environment,
            )
        compaction = batchmark("history", "--store", url, "--compact", "--last", "1", environment=environment)
        print(
            f"s3 history --compact (every loose entry into one object, then the table of the last): {compaction:.2f} s"
        )
        for label, args in (
            ("json", ["--format", "json"]),
            ("table, last 20", ["--last", "20"]),
            ("json, one model of all", ["--format", "json", "--model", "Qwen/*"]),
        ):
            timed(f"s3 history {label}, compacted", repeat, "--store", url, *args, environment=environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--loose-repeat", type=int, default=1, help="repeats over the bucket's loose entries (0: none; ~9 s each)"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="batchmark-history-") as folder:
        store = Path(folder)
        real = fill(store, options.runs)
        print(f"{options.runs} runs in {store}; load {os.getloadavg()[0]:.1f}")
        baseline = [batchmark("--version") for _ in range(options.repeat)]
        for label, args in (
            ("json", ["--format", "json"]),
            ("table, last 20", ["--last", "20"]),
            ("json, one model of all", ["--format", "json", "--model", "Qwen/*"]),
        ):
            timed(f"folder history {label}", options.repeat, "--store", str(store), *args)
        print(f"(batchmark --version alone: median {statistics.median(baseline):.2f} s)")
    print(f"load: {os.getloadavg()[0]:.1f}")
    measure_s3(real, options.runs, options.repeat, options.loose_repeat)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
