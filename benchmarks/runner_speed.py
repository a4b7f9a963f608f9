"""Runner speed: (a) dispatcher throughput with a zero-cost engine, (b) engine utilisation in real time.

Usage:
    .venv/bin/python benchmarks/runner_speed.py dispatcher [--requests N] [--repeat K]
    .venv/bin/python benchmarks/runner_speed.py utilization [--requests N] [--repeat K]

(a) runs the simulated engine with time_scale=0, so every second measured is the runner's own overhead
(issuing, the pipe, the micro-batcher, prompt building, aggregation). (b) runs it with time_scale=1, where
each generate() sleeps as long as the modelled GPU would be busy, and reports the share of the timed phase
the engine spent inside generate().
"""

from __future__ import annotations

import argparse
import statistics

from batchmark.runner.config.run import RunConfig
from batchmark.runner.run.benchmark import BenchmarkRunner


def config(time_scale: float, requests: int) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "runner-speed",
            "backend": {
                "kind": "vllm_python_batch",
                "model": "Qwen/Qwen3-0.6B",
                "engine": "simulated",
                "batch_size": 256,
                "simulation": {"time_scale": time_scale},
            },
            "data": {"kind": "synthetic_text", "prompt_tokens": 128, "output_tokens": 128},
            "profile": {"kind": "throughput", "max_concurrency": 1024},
            "constraints": [{"kind": "max_requests", "count": requests}],
            "sample_requests": 0,
        }
    )


def measure(time_scale: float, requests: int) -> tuple[float, float]:
    return measure_run(config(time_scale, requests))


def measure_run(run: RunConfig) -> tuple[float, float]:
    """Requests/s of a run of one benchmark, and the engines' mean utilisation."""
    runner = BenchmarkRunner(run)
    runner.start()
    try:
        [result] = runner.run().benchmarks
    finally:
        runner.close()
    return result.throughput.requests_per_second, result.engine_utilization


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["dispatcher", "utilization"])
    parser.add_argument("--requests", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    time_scale = 0.0 if args.what == "dispatcher" else 1.0
    requests = args.requests or (200_000 if args.what == "dispatcher" else 10_240)
    runs = [measure(time_scale, requests) for _ in range(args.repeat)]
    rates = [rate for rate, _ in runs]
    utilizations = [utilization for _, utilization in runs]
    print(f"{args.what}: batch_size=256 max_concurrency=1024 prompt=128 output=128 requests={requests}")
    print(
        "  requests/s : " + " ".join(f"{rate:,.0f}" for rate in rates) + f"  (median {statistics.median(rates):,.0f})"
    )
    print(
        "  engine util: "
        + " ".join(f"{u:.4f}" for u in utilizations)
        + f"  (median {statistics.median(utilizations):.4f})"
    )


if __name__ == "__main__":
    main()
