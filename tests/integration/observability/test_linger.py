"""The /metrics server's life: it serves through the run and the linger after it, and a signal ends both."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from devtools.cluster.controlplane import free_port
from tests.cli import command, run_program
from tests.integration.observability.servers import http_get, stop

pytestmark = pytest.mark.integration

BACKEND = "kind=vllm_python_batch,model=Qwen/Qwen3-0.6B,batch_size=8,engine=simulated,simulation.time_scale=1"
ARGS = [
    "--backend",
    BACKEND,
    "--data",
    "kind=synthetic_text,prompt_tokens=256,output_tokens=64",
    "--profile",
    "kind=throughput,max_concurrency=16",
    "--constraint",
    "kind=max_duration,seconds=120",
]


def wait_for_metric(url: str, line: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(OSError):
            if any(candidate.startswith(line) for candidate in http_get(url).decode().splitlines()):
                return
        time.sleep(0.2)
    pytest.fail(f"{line} never appeared at {url}")


def test_serves_through_the_linger_and_a_second_signal_ends_it(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    results = tmp_path / "r.json"
    options = ["--name", "linger", "--metrics-port", str(port), "--metrics-linger", "60", "--output", str(results)]
    process = subprocess.Popen(
        command("run", "--quiet", *ARGS, *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_metric(url, 'batchmark_phase{batch_size="8",benchmark="linger",phase="measuring"', process)
        process.send_signal(signal.SIGTERM)  # as Kubernetes stops a pod: the run ends cleanly, results kept
        wait_for_metric(url, 'batchmark_phase{batch_size="8",benchmark="linger",phase="done"', process)
        deadline = time.monotonic() + 30
        while not results.exists():  # the phase turns "done" as the run returns; the files follow
            assert time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        assert json.loads(results.read_text())["complete"] is False  # written before the linger began
        time.sleep(1.0)
        assert process.poll() is None  # still serving the final values
        process.send_signal(signal.SIGTERM)
        ended = time.monotonic()
        process.wait(timeout=10)
        assert time.monotonic() - ended < 5  # the linger ended at once, not after its 60 s
    finally:
        stop(process)
    assert process.returncode == 128 + signal.SIGTERM
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass  # and the server is gone


def test_a_port_in_use_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = run_program(
            ["run", "--quiet", *ARGS, "--metrics-port", str(port), "--output", str(tmp_path / "r.json")], timeout=60
        )
    assert finished.code == 2
    assert "--metrics-port" in finished.stderr
    assert not (tmp_path / "r.json").exists()
