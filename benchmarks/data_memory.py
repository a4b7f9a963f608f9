#!/usr/bin/env python3
"""Peak memory of `batchmark run` over large data files against the same run on synthetic data.

Files are read as streams (JSONL a line at a time, a JSON list an item at a time through ijson): only the samples
are kept, so a file's size must not show in the runner's memory. Writes, once into --workdir, a JSONL of
--gigabytes (1 KiB records) and a ShareGPT-shaped JSON list of --sharegpt-megabytes (ShareGPT_V3's size, ~650 MB:
one list of conversations of ~7 KB, several turns each), then runs the simulated engine at zero cost over each (in
the file's order, and shuffled: a uniform draw from the whole file) and over synthetic text, each --repeat times,
and prints the median peak RSS of each and every run's (the largest of the runner's processes, from wait4).
Targets: the JSONL within +100 MB of the synthetic run, the ShareGPT list within +150 MB.

    .venv/bin/python benchmarks/data_memory.py --gigabytes 1 --sharegpt-megabytes 650 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BACKEND = "kind=vllm_python_batch,model=m,engine=simulated,batch_size=64,simulation.time_scale=0"
REQUESTS = 20_000
RECORD_BYTES = 1024


def write_jsonl(path: Path, gigabytes: float) -> None:
    target = int(gigabytes * 1e9)
    if path.exists() and path.stat().st_size >= target:
        return
    words = "the quick brown fox jumps over the lazy dog and keeps running through the field "
    with path.open("w", encoding="utf-8") as out:
        written = index = 0
        while written < target:
            text = f"record {index}: " + words * ((RECORD_BYTES - 60) // len(words))
            line = json.dumps({"prompt": text, "output_tokens_count": 1 + index % 64}) + "\n"
            out.write(line)
            written += len(line)
            index += 1


def write_sharegpt(path: Path, megabytes: float) -> None:
    """A JSON list shaped as ShareGPT_V3 is: {"id", "conversations": [{"from", "value"}, ...]}, ~7 KB each, written an
    item at a time. The first human turn and its answer are short enough for the simulated engine's context."""
    target = int(megabytes * 1e6)
    if path.exists() and path.stat().st_size >= target:
        return
    sentence = "a conversation turn that goes on about the weather, the news and the code under review. "
    with path.open("w", encoding="utf-8") as out:
        out.write("[\n")
        written = index = 0
        while written < target:
            turns = [{"from": "human", "value": f"question {index}: " + sentence * (1 + index % 4)}]
            turns.append({"from": "gpt", "value": sentence * (2 + index % 6)})
            turns += [{"from": "human" if turn % 2 else "gpt", "value": sentence * 12} for turn in range(1, 6)]
            item = ("," if index else "") + json.dumps({"id": f"sharegpt-{index}", "conversations": turns}) + "\n"
            out.write(item)
            written += len(item)
            index += 1
        out.write("]\n")


def peak_rss_mb(data: str) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one run."""
    command = [sys.executable, "-m", "batchmark.runner", "run", "--quiet", "--backend", BACKEND, "--data", data]
    command += ["--profile", "kind=throughput", "--constraint", f"kind=max_requests,count={REQUESTS}"]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{data}: failed: {process.stderr.read().decode() if process.stderr else ''}")
    return usage.ru_maxrss / 1024, elapsed  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--sharegpt-megabytes", type=float, default=650.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/batchmark-data-memory"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / "prompts.jsonl"
    write_jsonl(path, args.gigabytes)
    sharegpt = args.workdir / "sharegpt.json"
    write_sharegpt(sharegpt, args.sharegpt_megabytes)
    runs = {
        "synthetic": "kind=synthetic_text,prompt_tokens=1000,output_tokens=32",
        "file, in order": f"kind=file,path={path}",
        "file, shuffled": f"kind=file,path={path},shuffle=true",
        "file, 100000 samples": f"kind=file,path={path},samples=100000",
        "sharegpt, in order": f"kind=sharegpt,path={sharegpt}",
        "sharegpt, shuffled": f"kind=sharegpt,path={sharegpt},shuffle=true",
    }
    print(f"{path}: {path.stat().st_size / 1e9:.2f} GB, {REQUESTS} requests per run")
    print(f"{sharegpt}: {sharegpt.stat().st_size / 1e6:.0f} MB, a JSON list")
    for name, data in runs.items():
        measured = [peak_rss_mb(data) for _ in range(args.repeat)]
        rss = statistics.median(m[0] for m in measured)
        wall = statistics.median(m[1] for m in measured)
        print(f"{name:22s} peak RSS {rss:7.1f} MB  wall {wall:5.1f} s  (runs: {[round(m[0]) for m in measured]})")


if __name__ == "__main__":
    main()
