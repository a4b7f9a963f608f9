"""A controller-runtime manager (Kueue's, JobSet's) run as a local process against a ControlPlane: started detached
with its log under the control plane's logs, ready once its /readyz answers, stopped with a grace period; and the
`up` command that starts one against a control plane `devtools/cluster/up` started."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from devtools.cluster import processes
from devtools.cluster.controlplane import ClusterError, ControlPlane


@dataclass
class ManagerProcess:
    """The process of one manager; a subclass names it (``name``, ``title``) and builds its command."""

    name: ClassVar[str]  # its folder, its log's and its process record's name, e.g. "kueue"
    title: ClassVar[str]  # as people write it, e.g. "Kueue"
    control_plane: ControlPlane
    # Keyword-only, so that a subclass's own fields (its binaries) follow control_plane when given by position.
    health_port: int = field(default=0, kw_only=True)
    metrics_port: int = field(default=0, kw_only=True)
    _record: processes.ProcessRecord | None = field(default=None, kw_only=True)
    _process: subprocess.Popen[bytes] | None = field(default=None, kw_only=True)

    @property
    def directory(self) -> Path:
        return self.control_plane.run_directory / self.name

    @property
    def log_file(self) -> Path:
        return self.control_plane.layout.log_directory / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self._record is not None and processes.is_alive(self._record)

    def launch(self, command: Sequence[str], timeout_seconds: float) -> float:
        """Start the command detached and wait until its /readyz (on ``health_port``) answers; the deadline the
        caller may wait on for more. ClusterError (the process stopped) when it exits or the deadline passes."""
        self._process, self._record = processes.start_detached(
            self.name, list(command), self.log_file, self.control_plane.layout.pid_directory
        )
        deadline = time.monotonic() + timeout_seconds
        while not self._ready():
            self.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"timed out waiting for {self.title} to be ready; its log is {self.log_file}")
            time.sleep(0.2)
        return deadline

    def check_alive(self) -> None:
        """ClusterError with the end of its log (the process stopped) when it has exited."""
        if self._process is not None and self._process.poll() is not None:
            tail = self.log_file.read_text(errors="replace")[-3000:]
            code = self._process.returncode
            self.stop()
            raise ClusterError(f"{self.name} exited with status {code}; end of its log:\n{tail}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        """Stop the process (its CRDs and objects stay, as after uninstalling its Deployment)."""
        if self._record is not None:
            processes.stop(self._record, grace_seconds=15)
            processes.forget(self.control_plane.layout.pid_directory, self._record)
            self._record = None
        if self._process is not None:
            self._process.wait(timeout=5)
            self._process = None


def up_command(
    argv: Sequence[str] | None, description: str, start: Callable[[ControlPlane], ManagerProcess], version: str
) -> int:
    """`up --run-dir RUN_DIR`: start a manager (``start``: made and started) against the control plane that
    `devtools/cluster/up` started there (its `down` stops the manager too)."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="install its CRDs and start its manager")
    up.add_argument("--run-dir", required=True, help="the control plane's folder")
    arguments = parser.parse_args(argv)
    run_directory = Path(arguments.run_dir).resolve()
    if not (run_directory / "admin.kubeconfig").exists():
        print(f"no control plane in {run_directory}; start one with devtools/cluster/up", file=sys.stderr)
        return 1
    try:
        manager = start(ControlPlane(run_directory))
    except ClusterError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{manager.name} {version} ready; log: {manager.log_file}", file=sys.stderr)
    return 0
