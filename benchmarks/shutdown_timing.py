"""How soon `batchmark` can act on a signal, and how long it takes to end after SIGTERM.

Usage:
    .venv/bin/python benchmarks/shutdown_timing.py [--repeat K]

(a) Signal readiness: from the start of the process until its SIGTERM handler is installed (read from
/proc/PID/status, SigCgt), for the program (`python -m batchmark.runner`, what the `batchmark` script runs) and
for `python -m batchmark.runner.cli`, which installs the same handlers only after importing everything.
(b) Shutdown: from SIGTERM, sent 1 s into a benchmark on the simulated engine (time_scale=1), to the exit of
the process, plain and with a Pushgateway that never answers plus a 60 s metrics linger (the bound is 20 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = [
    "run",
    "--quiet",
    "--backend",
    "kind=vllm_python_batch,model=m,batch_size=8,engine=simulated,simulation.time_scale=1",
    "--data",
    "kind=synthetic_text,prompt_tokens=64,output_tokens=64",
    "--profile",
    "kind=throughput,max_concurrency=16",
    "--constraint",
    "kind=max_duration,seconds=120",
]


def catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signal.SIGTERM - 1)))


def readiness(module: str, workdir: Path) -> float:
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", module, *RUN, "--output", str(workdir / "r.json")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not catches_sigterm(process.pid):
        time.sleep(0.001)
    seconds = time.monotonic() - started
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    return seconds


def shutdown(extra: list[str], workdir: Path) -> float:
    stderr = workdir / "stderr.txt"
    with stderr.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "batchmark.runner", *RUN, *extra, "--output", str(workdir / "r.json")],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    while "benchmark 1" not in stderr.read_text():
        time.sleep(0.01)
    time.sleep(1.0)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    return time.monotonic() - signalled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, socket.socket() as silent:
        workdir = Path(directory)
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        gateway = f"http://127.0.0.1:{silent.getsockname()[1]}"
        for module in ("batchmark.runner", "batchmark.runner.cli"):
            times = [readiness(module, workdir) for _ in range(args.repeat)]
            print(
                f"(a) handlers installed, python -m {module}: median {statistics.median(times):.3f} s "
                f"({' / '.join(f'{t:.3f}' for t in times)})"
            )
        for label, extra in (
            ("plain", []),
            (
                "silent Pushgateway + 60 s linger",
                ["--pushgateway", gateway, "--metrics-port", "0", "--metrics-linger", "60"],
            ),
        ):
            times = [shutdown(extra, workdir) for _ in range(args.repeat)]
            print(
                f"(b) SIGTERM to exit, {label}: median {statistics.median(times):.2f} s "
                f"(max {max(times):.2f}; {' / '.join(f'{t:.2f}' for t in times)})"
            )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
