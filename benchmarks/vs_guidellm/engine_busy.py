"""How busy each tool keeps vLLM, and how fast its engine steps, measured from outside and alike for all (a
benchmark, not a test).

The tools, run one at a time on the same engine, model and workload, in rounds that alternate who goes first:

* ``vllm_chunked``, ``vllm_engine_loop``: the plain loops of plain_loop.py, vLLM with no harness at all: the
  references batch dispatch and continuous dispatch are held to (issue 23);
* ``guidellm``: GuideLLM 0.8.1's ``vllm_python_batch``;
* ``batchmark_batch``, ``batchmark_continuous``: batchmark's two dispatch modes.

Every process of every run carries the probe (probe/sitecustomize.py: a wrapper around vLLM's ``LLM.generate``,
``LLMEngine.step`` and ``EngineCore.step``, and per-thread CPU samples), and probe/analyse.py turns its records
into the same figures for every tool:

* busy: share of the window (first engine call to last) spent inside ``generate()``/``step()``;
* core busy: share of the window in which vLLM's engine core ran a model step (where it runs in a process of
  its own, it can step while the caller is elsewhere);
* steps per 1,000 requests: engine-core steps that ran the model, per 1,000 requests (machine-independent);
* ms per core step: the engine core's mean time per step, and its ratio to the plain loop's in the same round
  (what a tool's processes cost the engine, whatever the machine's speed at the moment);
* harness CPU per request: CPU seconds of the tool's own processes within the window, vLLM's share removed;
* CPU seconds per process (by role: the process calling vLLM, the tool's others, ``VLLM::EngineCore``,
  ``VLLM::Worker``) and per thread, within the window;
* wall-clock throughput: output tokens per second of the window, and its ratio to the plain loop's.

batchmark's own figures (engine_utilization, dispatch_overhead, engine_steps, harness_cpu_per_request) are
recorded beside the probe's. vLLM runs in its default multiprocessing mode (engine core in its own process,
as users run it) and in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); ``--modes`` picks. Real-engine rounds
take the machine-wide vLLM lock one round at a time; the processes a run leaves behind are ended by their
pids, which the probe recorded. For a diagnosis: ``--py-spy DIR`` records every run with py-spy;
``ENGINE_BUSY_VLLM_CONFIG`` (JSON) adds engine arguments for every tool; ``ENGINE_BUSY_TASKSET`` (``tool:cpus``,
``;``-separated) starts a tool's processes on those CPUs.

    .venv-vllm/bin/python benchmarks/vs_guidellm/engine_busy.py --engines vllm --modes default \
        --batch-sizes 8,32,128 --rounds 3 --requests 512

Results: benchmarks/vs_guidellm/results/engine_busy-<engine>-<mode>.json, and Markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script from anywhere: the repository's root first

from benchmarks.vs_guidellm.probe.analyse import analyse, pids  # noqa: E402
from benchmarks.vs_guidellm.run import OUTPUT_TOKENS, PROMPT_TOKENS, ensure_model, simulated_vllm_path  # noqa: E402
from benchmarks.vs_guidellm.run import guidellm_command as reference_guidellm_command  # noqa: E402
from benchmarks.vs_guidellm.run import vllm_config as reference_config  # noqa: E402

PYTHON = Path(sys.executable)


def vllm_config(engine: str) -> dict[str, Any]:
    """The side-by-side benchmark's engine settings, without torch.compile on the real engine: its warm-up
    compiles C++ for minutes on a busy 2-core machine, and both tools run the same eager engine anyway."""
    config = reference_config(engine)
    extra = json.loads(os.environ.get("ENGINE_BUSY_VLLM_CONFIG", "{}"))  # a diagnosis's engine change, for all
    return {**config, "enforce_eager": True, **extra} if engine == "vllm" else config


LOCK = Path("/tmp/batchmark-vllm.lock")
TOOLS = ("vllm_chunked", "vllm_engine_loop", "guidellm", "batchmark_batch", "batchmark_continuous")
# Each batchmark dispatch mode's reference: the plain loop (plain_loop.py) doing its job with no harness.
REFERENCE = {"batchmark_batch": "vllm_chunked", "batchmark_continuous": "vllm_engine_loop", "guidellm": "vllm_chunked"}
PY_SPY = Path(sys.executable).parent.parent.parent / ".venv" / "bin" / "py-spy"


def environment(engine: str, mode: str, probe_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="2",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        BATCHMARK_PROBE_DIR=str(probe_dir),
    )
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    if mode == "inprocess":
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    paths = [str(HERE / "probe")]
    if engine == "simulated":
        paths.append(str(simulated_vllm_path()))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, env.get("PYTHONPATH")]))
    return env


@contextlib.contextmanager
def vllm_lock(engine: str) -> Iterator[None]:
    """The machine-wide lock for the real engine (two engines at once fight over core 0)."""
    if engine != "vllm":
        yield
        return
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def end_leftovers(probe_dir: Path) -> list[str]:
    """End the processes this run started that are still there (by pid, checked to be this run's); returns
    each one's pid and name (``VLLM::EngineCore`` and the like) so that a run that leaks is on record."""
    ended = []
    marker = f"BATCHMARK_PROBE_DIR={probe_dir}".encode()
    for pid in sorted(pids(probe_dir)):
        try:
            if marker not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                continue
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            os.kill(pid, signal.SIGKILL)
            ended.append(f"{pid} {name}")
        except (OSError, ProcessLookupError):
            continue
    return ended


def vllm_processes() -> list[str]:
    """``pgrep -af '^VLLM::'``: vLLM's engine processes on the machine (under the lock, none should be)."""
    found = subprocess.run(["pgrep", "-af", "^VLLM::"], capture_output=True, text=True, check=False)
    return found.stdout.splitlines()


def execute(command: list[str], env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with log.open("w") as output:
        completed = subprocess.run(command, env=env, stdout=output, stderr=subprocess.STDOUT, timeout=1800, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed ({completed.returncode}):\n{log.read_text()[-3000:]}")
    return time.monotonic() - started


def guidellm_command(model: Path, engine: str, batch_size: int, requests: int, out: Path) -> list[str]:
    return reference_guidellm_command(model, batch_size, requests, out, vllm_config(engine))


def batchmark_command(
    model: Path, engine: str, batch_size: int, requests: int, dispatch: str, out: Path, workdir: Path
) -> list[str]:
    config = {
        "name": f"engine-busy-{dispatch}-{batch_size}",
        "backend": {
            "kind": "vllm_python_batch",
            "model": str(model),
            "engine": "vllm",  # the real engine, or the simulated stand-in under vLLM's name
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
    path = workdir / f"{out.stem}.yaml"
    path.write_text(yaml.safe_dump(config))
    return [str(PYTHON), "-m", "batchmark.runner.cli", "run", "--config", str(path), "--quiet"]


def plain_loop_command(model: Path, engine: str, batch_size: int, requests: int, loop: str) -> list[str]:
    return [
        str(PYTHON),
        str(HERE / "plain_loop.py"),
        str(model),
        "--loop",
        loop,
        "--batch-size",
        str(batch_size),
        "--requests",
        str(requests),
        "--prompt-tokens",
        str(PROMPT_TOKENS),
        "--output-tokens",
        str(OUTPUT_TOKENS),
        "--vllm-config",
        json.dumps(vllm_config(engine)),
    ]


def measure(
    tool: str,
    engine: str,
    mode: str,
    model: Path,
    batch_size: int,
    requests: int,
    workdir: Path,
    py_spy: Path | None = None,
) -> dict[str, Any]:
    probe_dir = Path(tempfile.mkdtemp(prefix=f"probe-{tool}-", dir=workdir))
    out = workdir / f"{tool}-{engine}-{mode}-{batch_size}.json"
    env = environment(engine, mode, probe_dir)
    if tool == "guidellm":
        command = guidellm_command(model, engine, batch_size, requests, out)
    elif tool.startswith("vllm_"):
        command = plain_loop_command(model, engine, batch_size, requests, tool.removeprefix("vllm_"))
    else:
        dispatch = tool.removeprefix("batchmark_")
        command = batchmark_command(model, engine, batch_size, requests, dispatch, out, workdir)
    pinned = dict(item.split(":", 1) for item in filter(None, os.environ.get("ENGINE_BUSY_TASKSET", "").split(";")))
    if tool in pinned:  # the tool's processes start on these CPUs (vLLM's auto binding then picks among them)
        command = ["taskset", "-c", pinned[tool], *command]
    if py_spy is not None:
        # Sampled from outside: no code of the tool's changes.
        py_spy.mkdir(parents=True, exist_ok=True)
        profile = py_spy / f"{tool}-{engine}-{mode}-{batch_size}.txt"
        command = [
            str(PY_SPY),
            "record",
            "--subprocesses",
            "--format",
            "raw",
            "--rate",
            "200",
            "--output",
            str(profile),
            "--",
            *command,
        ]
    load_before = os.getloadavg()[0]
    try:
        wall = execute(command, env, out.with_suffix(".log"))
    finally:
        time.sleep(1.5)  # the probe's last writes
        vllm_after = vllm_processes()
        leftovers = end_leftovers(probe_dir)
    load_after = os.getloadavg()[0]
    figures = analyse(probe_dir)
    window = figures["window_seconds"]
    row: dict[str, Any] = {
        "busy": figures["busy_fraction"],
        "core_busy": figures["core_busy_fraction"],
        "steps_per_1000_requests": 1000 * figures["steps"] / requests,
        "harness_cpu_per_request": figures["harness_cpu_seconds"] / requests,
        "output_tokens_per_second": requests * OUTPUT_TOKENS / window,
        "core_step_ms_mean": 1000 * figures["core_step_seconds_mean"],
        "core_step_ms_median": 1000 * figures["core_step_seconds_median"],
        "cpu_by_process": figures["cpu_by_process"],
        "window_seconds": window,
        "wall_seconds": wall,
        "processes_left_behind": len(leftovers),
        "left_behind": leftovers,
        "vllm_processes_after": vllm_after,
        "load_average": [load_before, load_after],
    }
    if tool.startswith("batchmark_"):
        [result] = json.loads(out.read_text())["benchmarks"]
        overhead = result["distributions"]["dispatch_overhead"]
        row["own"] = {
            "engine_utilization": result["engine_utilization"],
            "dispatch_overhead_mean": overhead["mean"],
            "dispatch_overhead_p99": overhead["p99"],
            "engine_steps_per_1000_requests": result["engine_steps_per_1000_requests"],
            "harness_cpu_per_request": result["harness_cpu_per_request"],
            "output_tokens_per_second": result["throughput"]["output_tokens_per_second"],
            "measured_duration": result["measured_duration"],
            "duration": result["duration"],
            "engine_steps": result["engine_steps"],
            "output_tokens": result["tokens"]["output"],
        }
    return row


FIGURES = (
    "busy",
    "core_busy",
    "steps_per_1000_requests",
    "harness_cpu_per_request",
    "output_tokens_per_second",
    "core_step_ms_mean",
    "core_step_ms_median",
)
OWN = ("engine_utilization", "dispatch_overhead_mean", "engine_steps_per_1000_requests", "harness_cpu_per_request")


def spread(values: list[float | None] | list[float]) -> dict[str, float] | None:
    present = [value for value in values if value is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def same_round_ratios(rounds: list[dict[str, Any]], tool: str, reference: str, key: str) -> list[float]:
    """``tool``'s figure over ``reference``'s, each round on its own: the two ran minutes apart under the same
    lock, so the machine's slower and faster stretches move both sides of a ratio more than either figure."""
    return [
        measured[tool][key] / measured[reference][key]
        for measured in rounds
        if tool in measured and reference in measured and measured[reference][key]
    ]


def window_split(row: dict[str, Any], requests: int) -> tuple[float, float]:
    """batchmark's own utilisation against the probe's, split in two: over the probe's window (the engine
    time each counted, like for like) and the seconds batchmark's window starts before the probe's (from the
    benchmark's start to the first engine call: the engine idle while the first batch was prepared).

    batchmark's window is its measured duration (in rows recorded before it was kept: every request's output
    tokens over its own output throughput, as every request completes in these runs)."""
    own = row["own"]
    measured = own.get("measured_duration") or requests * OUTPUT_TOKENS / own["output_tokens_per_second"]
    busy_seconds = own["engine_utilization"] * measured
    return busy_seconds / row["window_seconds"] - row["busy"], measured - row["window_seconds"]


def summarise(entry: dict[str, Any], tools: list[str]) -> None:
    summary: dict[str, Any] = {}
    for tool in tools:
        rows = [r[tool] for r in entry["rounds"] if tool in r]
        summary[tool] = {key: spread([row.get(key) for row in rows]) for key in FIGURES}
        summary[tool]["load_average"] = spread([load for row in rows for load in row.get("load_average", [])])
        if tool.startswith("batchmark_"):
            summary[tool]["throughput_over_guidellm"] = spread(
                same_round_ratios(entry["rounds"], tool, "guidellm", "output_tokens_per_second")
            )
        if tool in REFERENCE:
            reference = REFERENCE[tool]
            summary[tool]["throughput_over_reference"] = spread(
                same_round_ratios(entry["rounds"], tool, reference, "output_tokens_per_second")
            )
            summary[tool]["step_time_over_reference"] = spread(
                same_round_ratios(entry["rounds"], tool, reference, "core_step_ms_mean")
            )
        processes = [row.get("cpu_by_process", []) for row in rows]
        summary[tool]["cpu_seconds_by_role"] = {
            role: spread([sum(p["cpu_seconds"] for p in run if p["role"] == role) for run in processes])
            for role in sorted({p["role"] for run in processes for p in run})
        }
        if rows and "own" in rows[0]:
            summary[tool]["own"] = {key: spread([row["own"][key] for row in rows]) for key in OWN}
            summary[tool]["own_minus_probe_busy"] = spread(
                [row["own"]["engine_utilization"] - row["busy"] for row in rows]
            )
            split = [window_split(row, entry["requests"]) for row in rows]
            summary[tool]["own_minus_probe_same_window"] = spread([same for same, _ in split])
            summary[tool]["idle_before_first_call"] = spread([idle for _, idle in split])
    entry["summary"] = summary


def cell(value: dict[str, float] | None, fmt: str) -> str:
    if value is None:
        return "n/a"
    if value["min"] == value["max"]:  # one round
        return f"{value['median']:{fmt}}"
    return f"{value['median']:{fmt}} [{value['min']:{fmt}}–{value['max']:{fmt}}]"


def milliseconds(seconds: dict[str, float] | None) -> dict[str, float] | None:
    """A spread of seconds (median, min, max) in milliseconds."""
    return {key: value * 1000 for key, value in seconds.items()} if seconds else None


def table(results: dict[str, Any]) -> str:
    lines = [
        f"#### {results['engine']} engine, vLLM {results['mode']} (median [min–max] of {results['rounds']} rounds)",
        "",
        "| B | tool | busy (probe) | core busy (probe) | steps / 1k req | own steps / 1k req "
        "| harness CPU ms / req | out tok/s | × GuideLLM (same round) | own util | own − probe "
        "| own − probe (probe's window) | idle before first call s | overhead ms / batch | load avg "
        "| left behind |",
        "|---:|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for batch_size, entry in results["by_batch_size"].items():
        for tool, figures in entry.get("summary", {}).items():
            if figures["busy"] is None:
                continue
            own = figures.get("own")
            cpu_ms = milliseconds(figures["harness_cpu_per_request"])
            overhead_ms = milliseconds(own["dispatch_overhead_mean"] if own else None)
            left = sum(row[tool]["processes_left_behind"] for row in entry["rounds"] if tool in row)
            lines.append(
                f"| {batch_size} | {tool.replace('_', ' ')} | {cell(figures['busy'], '.4f')} | "
                f"{cell(figures['core_busy'], '.4f')} | {cell(figures['steps_per_1000_requests'], ',.0f')} | "
                f"{cell(own['engine_steps_per_1000_requests'], ',.0f') if own else 'n/a'} | "
                f"{cell(cpu_ms, '.3f')} | {cell(figures['output_tokens_per_second'], ',.0f')} | "
                f"{cell(figures.get('throughput_over_guidellm'), '.2f')} | "
                f"{cell(own['engine_utilization'], '.4f') if own else 'n/a'} | "
                f"{cell(figures.get('own_minus_probe_busy'), '+.4f') if own else 'n/a'} | "
                f"{cell(figures.get('own_minus_probe_same_window'), '+.4f') if own else 'n/a'} | "
                f"{cell(figures.get('idle_before_first_call'), '.2f') if own else 'n/a'} | "
                f"{cell(overhead_ms, '.2f')} | {cell(figures.get('load_average'), '.1f')} | {left} |"
            )
    return "\n".join(lines)


def dispatch_table(results: dict[str, Any]) -> str:
    """Each tool against its plain loop (issue 23): throughput and the engine core's time per step, same round."""
    roles = ("vLLM caller", "tool's other process", "VLLM::EngineCore", "VLLM::Worker")
    lines = [
        f"#### {results['engine']} engine, vLLM {results['mode']}: against the plain loops "
        f"(median [min–max] of {results['rounds']} rounds; ratios within each round)",
        "",
        "| B | tool | out tok/s | × plain loop | ms / core step | step time × plain loop | core busy "
        "| steps / 1k req | harness CPU ms / req | CPU s: caller | CPU s: other | CPU s: engine core "
        "| CPU s: model worker |",
        "|---:|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for batch_size, entry in results["by_batch_size"].items():
        for tool, figures in entry.get("summary", {}).items():
            if figures["busy"] is None:
                continue
            cpu_ms = milliseconds(figures["harness_cpu_per_request"])
            by_role = figures.get("cpu_seconds_by_role", {})
            lines.append(
                f"| {batch_size} | {tool.replace('_', ' ')} | {cell(figures['output_tokens_per_second'], ',.0f')} | "
                f"{cell(figures.get('throughput_over_reference'), '.3f')} | "
                f"{cell(figures.get('core_step_ms_mean'), '.3f')} | "
                f"{cell(figures.get('step_time_over_reference'), '.3f')} | {cell(figures['core_busy'], '.4f')} | "
                f"{cell(figures['steps_per_1000_requests'], ',.0f')} | {cell(cpu_ms, '.3f')} | "
                + " | ".join(cell(by_role.get(role), ".1f") for role in roles)
                + " |"
            )
    return "\n".join(lines)


def requests(batch_size: int, args: argparse.Namespace) -> int:
    if args.requests:
        return int(args.requests)
    return max(256, int(args.requests_per_concurrency * 4 * batch_size))


def rotated(items: list[str], round_index: int) -> list[str]:
    """``items`` starting at the round's index: who runs first changes from round to round."""
    shift = round_index % len(items)
    return items[shift:] + items[:shift]


def running_order(tools: list[str], round_index: int) -> list[str]:
    """Who runs when in a round: rotated (who goes first changes), and reversed every other round, so that no
    tool always runs right after the same other one. A run right after another is slower (issue 23:
    benchmarks/notes/harness-contention.md), and plain rotation kept every pair's order."""
    order = rotated(tools, round_index // 2)
    return order[::-1] if round_index % 2 else order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="vllm,simulated")
    parser.add_argument("--modes", default="default,inprocess", help="vLLM multiprocessing: default, inprocess")
    parser.add_argument("--batch-sizes", default="8,32,128")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests-per-concurrency", type=float, default=2.0)
    parser.add_argument("--requests", type=int, help="requests per run at every batch size (instead of the above)")
    parser.add_argument("--output-suffix", default="")
    parser.add_argument("--resume", action="store_true", help="add the rounds to the results files already there")
    parser.add_argument("--report-only", action="store_true", help="print the tables of the results files there")
    parser.add_argument("--py-spy", type=Path, help="record every run with py-spy into this folder (a diagnosis)")
    args = parser.parse_args()
    model = ensure_model()
    tools = args.tools.split(",")
    (HERE / "results").mkdir(exist_ok=True)
    batch_sizes = [int(value) for value in args.batch_sizes.split(",")]
    for engine in args.engines.split(","):
        # The simulated stand-in has no engine-core process: one mode.
        modes = args.modes.split(",") if engine == "vllm" else ["inprocess"]
        if args.report_only:
            for mode in modes:
                path = HERE / "results" / f"engine_busy-{engine}-{mode}{args.output_suffix}.json"
                if path.exists():
                    results = json.loads(path.read_text())
                    for entry in results["by_batch_size"].values():
                        summarise(entry, tools)
                    print(table(results), flush=True)
                    print(dispatch_table(results), flush=True)
            continue
        by_mode: dict[str, dict[str, Any]] = {}
        for mode in modes:
            path = HERE / "results" / f"engine_busy-{engine}-{mode}{args.output_suffix}.json"
            if args.resume and path.exists():
                by_mode[mode] = json.loads(path.read_text())
                for batch_size in batch_sizes:
                    by_mode[mode]["by_batch_size"].setdefault(
                        str(batch_size), {"requests": requests(batch_size, args), "rounds": []}
                    )
                continue
            by_mode[mode] = {
                "engine": engine,
                "mode": mode,
                "rounds": 0,
                "machine": f"{os.cpu_count()} CPUs",
                "prompt_tokens": PROMPT_TOKENS,
                "output_tokens": OUTPUT_TOKENS,
                "by_batch_size": {
                    str(batch_size): {"requests": requests(batch_size, args), "rounds": []}
                    for batch_size in batch_sizes
                },
            }
        with tempfile.TemporaryDirectory(prefix=f"engine-busy-{engine}-") as temporary:
            workdir = Path(temporary)
            for _ in range(args.rounds):
                # One lock per round (every batch size, both modes, every tool): a round is what the figures
                # compare, and taking the lock again between its parts let other work wedge in for tens of
                # minutes. Modes and tools alternate who runs first from round to round.
                with vllm_lock(engine):
                    for batch_size in batch_sizes:
                        for mode in rotated(modes, len(by_mode[modes[0]]["by_batch_size"][str(batch_size)]["rounds"])):
                            results = by_mode[mode]
                            entry = results["by_batch_size"][str(batch_size)]
                            index = len(entry["rounds"])
                            measured: dict[str, Any] = {"load_average": os.getloadavg()[0]}
                            for tool in running_order(tools, index):
                                measured[tool] = measure(
                                    tool, engine, mode, model, batch_size, entry["requests"], workdir, args.py_spy
                                )
                            entry["rounds"].append(measured)
                            summarise(entry, tools)
                            # So far: a stopped run's file says what it holds, and --resume continues it.
                            results["rounds"] = max(len(e["rounds"]) for e in results["by_batch_size"].values())
                            path = HERE / "results" / f"engine_busy-{engine}-{mode}{args.output_suffix}.json"
                            path.write_text(json.dumps(results, indent=2))
                            print(f"{engine} {mode} B={batch_size} round {index + 1} done", file=sys.stderr)
        for results in by_mode.values():
            print(table(results), flush=True)
            print(dispatch_table(results), flush=True)


if __name__ == "__main__":
    main()
