"""The over_saturation constraint on the simulated engine, over seeded runs: how often a rate it serves is stopped
(false positives), and how soon a rate above its capacity is.

Usage (from the repository root):

    .venv/bin/python benchmarks/saturation_detection.py [--seeds 6] [--seconds 40] [--parallel 3]

The engine: the async backend on the simulated engine with 10 ms steps and 4 sequences at a time, 10 output tokens
a request (11 steps), each step's time scattered by 10 % (``step_time_noise``, seeded). Its capacity is measured
first (a throughput profile at 64 in flight, requests/s). Then, for each load (a share of that capacity) and
seed, one `batchmark run` with a poisson profile at that rate (seeded), ``--seconds`` long, with
``over_saturation`` (a 10 s window, 6 segments, 3 checks in a row: the earliest stop is at 13.3 s): below
capacity it should run to its end, above it stop early. Runs go ``--parallel`` at a time (the engine sleeps its
modelled time; each run uses little CPU). Prints one JSON object: per load, the runs stopped and when.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(sys.executable)
STABLE_LOADS = (0.5, 0.8, 0.9)
OVERLOADS = (1.3, 2.0)
WATCH = {"kind": "over_saturation", "seconds": 10.0, "segments": 6, "checks": 3}


def engine(seed: int) -> dict[str, Any]:
    return {
        "kind": "vllm_python_async",
        "model": "sim",
        "engine": "simulated",
        "vllm_config": {"max_num_seqs": 4},
        "simulation": {
            "time_scale": 1.0,
            "step_fixed_seconds": 0.01,
            "batched_token_seconds": 0.0,
            "context_token_seconds": 0.0,
            "step_time_noise": 0.1,
            "noise_seed": seed,
        },
    }


def run(config: dict[str, Any], folder: Path, name: str) -> dict[str, Any]:
    report = folder / f"{name}.json"
    path = folder / f"{name}-config.json"
    path.write_text(json.dumps({**config, "outputs": [str(report)]}))
    done = subprocess.run(
        [str(PYTHON), "-m", "batchmark.runner", "run", "--quiet", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    [benchmark] = json.loads(report.read_text())["benchmarks"]
    return dict(benchmark)


def capacity(folder: Path) -> float:
    config = {
        "backend": engine(0),
        "data": {"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 10},
        "profile": {"kind": "throughput", "max_concurrency": 64},
        "constraints": [{"kind": "max_duration", "seconds": 15}],
    }
    return float(run(config, folder, "capacity")["throughput"]["requests_per_second"])


def at_load(rate: float, seed: int, seconds: float, folder: Path, name: str) -> dict[str, Any]:
    config = {
        "backend": engine(seed),
        "data": {"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": 10},
        "profile": {"kind": "poisson", "rate": rate, "seed": seed},
        "constraints": [{"kind": "max_duration", "seconds": seconds}, WATCH],
    }
    benchmark = run(config, folder, name)
    return {
        "stopped": benchmark["stop_reason"] == "over_saturation",
        "duration": round(benchmark["duration"], 2),
        "check": benchmark["saturation"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--parallel", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="saturation-") as name:
        folder = Path(name)
        served = capacity(folder)
        jobs = {
            (load, seed): (load * served, seed)
            for load in (*STABLE_LOADS, *OVERLOADS)
            for seed in range(1, args.seeds + 1)
        }
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            futures = {
                key: pool.submit(at_load, rate, seed, args.seconds, folder, f"load{key[0]}-seed{seed}")
                for key, (rate, seed) in jobs.items()
            }
            outcomes = {key: future.result() for key, future in futures.items()}
    summary: dict[str, Any] = {"capacity_requests_per_second": round(served, 2), "seconds": args.seconds}
    for load in (*STABLE_LOADS, *OVERLOADS):
        runs = [outcomes[(load, seed)] for seed in range(1, args.seeds + 1)]
        stops = [entry["duration"] for entry in runs if entry["stopped"]]
        summary[f"load {load}"] = {"runs": len(runs), "stopped": len(stops), "stopped_after_s": sorted(stops)}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
