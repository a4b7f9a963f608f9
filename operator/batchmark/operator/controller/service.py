"""The ``batchmark operator`` process: kopf, standalone, with its liveness endpoint and the operator's own /metrics."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import start_http_server
from pydantic import ValidationError

from batchmark.operator.controller import handlers
from batchmark.operator.controller.dispatch import Dispatch
from batchmark.operator.controller.kube import Kube, api_client
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.controller.workers import API_CONNECTIONS, ControllerThreads
from batchmark.operator.resource.api import OperatorDefaults
from batchmark.runner.config.safeload import UnusableFile, read_document

_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
MALLOC_ARENAS = 2


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> None:
    """Let glibc's malloc keep at most ``arenas`` arenas in this process.

    glibc gives each thread that allocates under contention an arena of its own, up to 8 per core, and keeps
    what each arena once held: with the handlers' worker threads each parsing API responses, those arenas, not
    live objects, make most of a busy operator's RSS. Python's own allocator serves small objects either way.
    Does nothing where the C library is not glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, arenas)


class DefaultsError(ValueError):
    """The --defaults file cannot be used; the message names the key."""


def load_defaults(path: Path | None) -> OperatorDefaults:
    if path is None:
        return OperatorDefaults()
    try:
        data = read_document(path, "--defaults", "operator defaults")
    except UnusableFile as error:
        raise DefaultsError(str(error)) from None
    if data is None:  # an empty file: every default left unset
        data = {}
    try:
        return OperatorDefaults.model_validate(data)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"]) or "(file)"
        message = "unknown key" if problem["type"] == "extra_forbidden" else problem["msg"]
        raise DefaultsError(f"--defaults: {path}: {key}: {message}") from None


@dataclass
class OperatorOptions:
    """What `batchmark operator` takes (its options: `batchmark operator --help`)."""

    namespaces: Sequence[str] = ()
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8080
    health_address: str = "0.0.0.0"
    health_port: int = 8081
    defaults: OperatorDefaults = field(default_factory=OperatorDefaults)
    kubeconfig: str | None = None


def run_operator(
    options: OperatorOptions,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run until stopped (a signal, or stop_flag). Blocks."""
    limit_malloc_arenas()  # before the threads start
    metrics = OperatorMetrics()
    server, _ = start_http_server(options.metrics_port, options.metrics_address, registry=metrics.registry)
    try:
        threads = ControllerThreads()
        kube = Kube(api_client(options.kubeconfig, API_CONNECTIONS))
        reconciler = Reconciler(kube, threads, options.defaults, metrics)
        handlers.run(
            Dispatch(reconciler, threads),
            options.namespaces,
            f"http://{options.health_address}:{options.health_port}/healthz",
            stop_flag,
            ready_flag,
        )
    finally:
        server.shutdown()
        server.server_close()
