"""Real Prometheus, Pushgateway and promtool for the tests, on 127.0.0.1; every process started is stopped."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.cluster.controlplane import free_port

SETUP_HINT = "install it with scripts/setup/system.sh (scripts/test does)"


def require(binary: str) -> str:
    """The binary's path; a missing one fails the test (never skips it): the set-up installs it."""
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is not installed: {SETUP_HINT}")
    return path


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{process.args!r} exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        with contextlib.suppress(OSError):
            http_get(url, timeout=1.0)
            return
        time.sleep(0.1)
    pytest.fail(f"{url} not ready after {timeout} s:\n{log.read_text(errors='replace')}")


@contextlib.contextmanager
def running(command: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server in its own process group, wait until it answers, and stop it (group and all) after."""
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_ready(ready_url, process, log)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)


@dataclass
class Prometheus:
    url: str

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query through the HTTP API: the result list (vector or matrix)."""
        parameters = {"query": promql}
        if at is not None:
            parameters["time"] = f"{at:.3f}"
        body = json.loads(http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(parameters)}"))
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def samples(self, selector: str, window: str = "10m") -> list[tuple[float, float]]:
        """The raw scraped samples of exactly one series over the window (a range selector keeps them as
        scraped, before staleness hides a series whose target has gone)."""
        result = self.query(f"{selector}[{window}]")
        assert len(result) == 1, f"{selector}: expected one series, got {result}"
        return [(float(t), float(v)) for t, v in result[0]["values"]]


@contextlib.contextmanager
def prometheus(
    workdir: Path,
    targets: list[str],
    scrape_interval: str = "1s",
    honor_labels: bool = False,
    target_labels: dict[str, str] | None = None,
    job: str = "test",
) -> Iterator[Prometheus]:
    """A Prometheus scraping the targets; target_labels are added to their series, as a PodMonitor adds
    `namespace` and `pod`."""
    binary = require("prometheus")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": honor_labels,
                "static_configs": [{"targets": targets, "labels": target_labels or {}}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    command = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"
    with running(command, workdir / "prometheus.log", f"{url}/-/ready"):
        yield Prometheus(url)


@contextlib.contextmanager
def pushgateway(workdir: Path) -> Iterator[str]:
    binary = require("prometheus-pushgateway")
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    command = [
        binary,
        f"--web.listen-address=127.0.0.1:{port}",
        # Debian's build persists to /var/lib/prometheus by default: a test's pushes would outlive it and leak
        # into the next run. Each gateway keeps its own file in the test's folder.
        f"--persistence.file={workdir / 'pushgateway.data'}",
    ]
    with running(command, workdir / "pushgateway.log", f"{url}/-/ready"):
        yield url


def promtool_check_metrics(exposition: bytes) -> subprocess.CompletedProcess[bytes]:
    """promtool's linter over a /metrics body: exit 0 and no output when it finds nothing to complain about."""
    return subprocess.run(
        [require("promtool"), "check", "metrics"], input=exposition, capture_output=True, timeout=60, check=False
    )
