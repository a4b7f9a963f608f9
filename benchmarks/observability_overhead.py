"""What the live Prometheus metrics cost the dispatcher, and how long an HTML report takes to render.

Usage:
    .venv/bin/python benchmarks/observability_overhead.py [--requests N] [--repeat K]

The runner-speed dispatcher workload (simulated engine, time_scale=0: every second is the runner's own work),
run without and with the MetricsObserver and its /metrics server; then the HTML report of the last result.
"""

from __future__ import annotations

import argparse
import statistics
import time

from batchmark.runner.config.run import RunConfig
from batchmark.runner.observe.metrics import MetricsObserver, MetricsServer
from batchmark.runner.results.htmlreport.render import render_report
from batchmark.runner.results.report import RunReport
from batchmark.runner.run.benchmark import BenchmarkRunner


def config(requests: int) -> RunConfig:
    """runner_speed.py's dispatcher workload, so the two sections' figures compare."""
    return RunConfig.model_validate(
        {
            "name": "observability-overhead",
            "backend": {
                "kind": "vllm_python_batch",
                "model": "Qwen/Qwen3-0.6B",
                "engine": "simulated",
                "batch_size": 256,
                "simulation": {"time_scale": 0.0},
            },
            "data": {"kind": "synthetic_text", "prompt_tokens": 128, "output_tokens": 128},
            "profile": {"kind": "throughput", "max_concurrency": 1024},
            "constraints": [{"kind": "max_requests", "count": requests}],
            "sample_requests": 0,
        }
    )


def measure(requests: int, with_metrics: bool) -> tuple[float, RunReport]:
    run_config = config(requests)
    runner = BenchmarkRunner(run_config)
    server = None
    if with_metrics:
        observer = MetricsObserver(run_config, runner.run_id)
        runner.observers.observers.append(observer)
        server = MetricsServer(observer.registry, 0)
    runner.start()
    try:
        report = runner.run()
    finally:
        runner.close()
        if server is not None:
            server.close()
    return report.benchmarks[0].throughput.requests_per_second, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    report = None
    for _ in range(args.repeat):
        for with_metrics in (False, True):  # interleaved, so a busy neighbour slows both alike
            rate, report = measure(args.requests, with_metrics)
            rates[with_metrics].append(rate)
    print(f"dispatcher: batch_size=256 max_concurrency=1024 prompt=128 output=128 requests={args.requests}")
    for with_metrics, label in ((False, "without metrics"), (True, "with metrics   ")):
        values = rates[with_metrics]
        print(f"  {label}: " + " ".join(f"{r:,.0f}" for r in values) + f"  (median {statistics.median(values):,.0f})")
    assert report is not None
    started = time.perf_counter()
    page = render_report(report)
    print(f"  HTML report: {len(page) / 1024:,.0f} KiB rendered in {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main()
