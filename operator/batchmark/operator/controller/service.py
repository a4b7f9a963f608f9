"""``batchmark operator``: kopf, standalone, with its liveness endpoint and the operator's own /metrics."""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kopf
from prometheus_client import start_http_server
from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.controller.dispatch import API_CONNECTIONS
from batchmark.operator.controller.handlers import build_registry, operator_memo
from batchmark.operator.controller.kube import Kube, api_client
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.resource.api import OperatorDefaults
from batchmark.runner.console import print_error
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.safeload import UnusableFile, read_document

log = logging.getLogger(__name__)
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
        reconciler = Reconciler(Kube(api_client(options.kubeconfig, API_CONNECTIONS)), options.defaults, metrics)
        kopf.run(
            registry=build_registry(),
            memo=operator_memo(reconciler),
            standalone=True,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            liveness_endpoint=f"http://{options.health_address}:{options.health_port}/healthz",
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        server.shutdown()
        server.server_close()


def operator_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kopf logs every handler's success per object at INFO: with hundreds of benchmarks that is most of the log.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        defaults = load_defaults(args.defaults)
    except DefaultsError as error:  # refused before anything starts, as argparse refuses: one line on stderr
        print_error(Console(stderr=True), "operator", str(error))
        return EXIT_USAGE
    options = OperatorOptions(
        namespaces=args.namespace or (),
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        health_address=args.health_address,
        health_port=args.health_port,
        defaults=defaults,
    )
    try:
        run_operator(options)
    except OSError as error:  # a port in use
        log.error("cannot serve: %s", error)
        return EXIT_USAGE
    return 0
