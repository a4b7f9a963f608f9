"""Engine replicas: does the one load generator keep every replica fed (issue 33's "the dispatcher over N replicas
keeps at least 0.9 of one replica's requests/s per replica")?

Usage:
    .venv/bin/python benchmarks/replica_dispatch.py [--replicas 1,2,4] [--repeat 3] [--mode zero-cost|paced]

Each repeat runs every replica count in turn (alternating, so drift spreads over all of them) and reports the
requests/s of the whole run and per replica, against one replica's (their ratio, per replica: 1.0 = every replica as
fast as a lone one).

- ``zero-cost``: the simulated engine at time_scale 0, batch 256: every second is the harness's own work (the
  load generator, the pipes, each replica's micro-batcher). N replicas then need N cores of their own besides the
  load generator's: on a machine with fewer cores the ratio measures the cores, not the dispatcher.
- ``paced``: the simulated engine at time_scale 1 with its default cost model, batch 32: each engine sleeps as long
  as the modelled GPU computes (~38 ms a batch), so the replicas need little CPU and the ratio shows whether the
  load generator keeps N engines as busy as one.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from batchmark.runner.config.run import RunConfig
from benchmarks.runner_speed import measure_run

MODES: dict[str, dict[str, Any]] = {
    "zero-cost": {"time_scale": 0.0, "batch_size": 256, "concurrency": 1024, "requests": 100_000},
    "paced": {"time_scale": 1.0, "batch_size": 32, "concurrency": 128, "requests": 1_500},
}


def config(mode: dict[str, Any], replicas: int) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "replica-dispatch",
            "backend": {
                "kind": "vllm_python_batch",
                "model": "Qwen/Qwen3-0.6B",
                "engine": "simulated",
                "batch_size": mode["batch_size"],
                "replicas": replicas,
                "simulation": {"time_scale": mode["time_scale"]},
            },
            "data": {"kind": "synthetic_text", "prompt_tokens": 128, "output_tokens": 128},
            # Each replica as loaded as one alone: the cap on requests in flight grows with the replicas.
            "profile": {"kind": "throughput", "max_concurrency": mode["concurrency"] * replicas},
            "constraints": [{"kind": "max_requests", "count": mode["requests"] * replicas}],
            "sample_requests": 0,
        }
    )


def measure(mode: dict[str, Any], replicas: int) -> tuple[float, float]:
    """Requests/s of the run, and the engines' mean utilisation."""
    return measure_run(config(mode, replicas))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=list(MODES), default="paced")
    args = parser.parse_args()
    counts = [int(value) for value in args.replicas.split(",")]
    mode = MODES[args.mode]
    runs: dict[int, list[tuple[float, float]]] = {count: [] for count in counts}
    for _ in range(args.repeat):
        for count in counts:
            runs[count].append(measure(mode, count))
    print(f"{args.mode}: {mode}; {args.repeat} alternating repeats")
    single = statistics.median(rate for rate, _ in runs[1]) if 1 in runs else None
    for count in counts:
        rates = [rate for rate, _ in runs[count]]
        median = statistics.median(rates)
        per_replica = median / count
        ratio = f"  per replica / one replica: {per_replica / single:.3f}" if single else ""
        utilisation = statistics.median(utilization for _, utilization in runs[count])
        print(
            f"  {count} replica(s): requests/s "
            + " ".join(f"{rate:,.0f}" for rate in rates)
            + f" (median {median:,.0f}, spread {(max(rates) - min(rates)) / median:.1%});"
            f" per replica {per_replica:,.0f}; engine utilisation {utilisation:.3f}{ratio}"
        )


if __name__ == "__main__":
    main()
