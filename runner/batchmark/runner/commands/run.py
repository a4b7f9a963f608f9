"""``batchmark run``: load the config, run every benchmark, write the outputs, push and linger; the exit code."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry
from rich.console import Console

from batchmark.runner.config.arguments import DEFAULT_LINGER_SECONDS
from batchmark.runner.config.load import UsageError, load_config
from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import EXIT_ENGINE_FAILED, EXIT_FAILED, EXIT_OUTPUT_FAILED, EXIT_USAGE
from batchmark.runner.data.records import DataError
from batchmark.runner.dispatch.process_group import engine_processes, leftover_engines_warning
from batchmark.runner.dispatch.replica_devices import DeviceSplitError
from batchmark.runner.engines.engine_args import EngineArgumentError
from batchmark.runner.engines.engine_nodes import EngineNodes, EngineNodesError, serve_engine_node
from batchmark.runner.engines.entry import EngineUnavailable
from batchmark.runner.engines.registry import engine_entry
from batchmark.runner.engines.request_format import RequestFormatError
from batchmark.runner.lifecycle.shutdown import Shutdown
from batchmark.runner.observe.console import (
    ConsoleObserver,
    output_console,
    print_error,
    print_plain,
    print_summary,
    print_warning,
)
from batchmark.runner.observe.metrics import EngineNodeMetrics, MetricsObserver, MetricsServer
from batchmark.runner.observe.pushgateway import PushOutcome, push_results, run_succeeded
from batchmark.runner.observe.statuswriter import record_output_failure
from batchmark.runner.results.outputs import write_reports
from batchmark.runner.results.regression import describe
from batchmark.runner.results.report import RegressionReport, RunReport
from batchmark.runner.run.benchmark import BenchmarkRunner
from batchmark.runner.run.events import RunObserver
from batchmark.runner.store.baseline import judge_in
from batchmark.runner.store.results_store import StoreError, open_store


def run_command(
    args: argparse.Namespace, extra_observers: Sequence[RunObserver] = (), shutdown: Shutdown | None = None
) -> int:
    console = Console(stderr=True, quiet=False)
    shutdown = shutdown or Shutdown.install()
    try:
        config = load_config(args)
    except UsageError as error:
        print_error(console, "run", str(error))
        return EXIT_USAGE
    served = _serve_engine_node(console, args, config, shutdown)
    return served if served is not None else _run(console, args, config, extra_observers, shutdown)


def _run(
    console: Console,
    args: argparse.Namespace,
    config: RunConfig,
    extra_observers: Sequence[RunObserver],
    shutdown: Shutdown,
) -> int:
    """Every benchmark of the config, its outputs, the push and the linger: the exit code."""
    observers: list[RunObserver] = [ConsoleObserver(console, show_progress=not args.quiet), *extra_observers]
    try:
        runner = BenchmarkRunner(config, observers, stop=shutdown.stop, judge=_judge(config))
    except DataError as error:
        print_error(console, "run", f"--data: {error}")
        return EXIT_USAGE
    try:
        runner.check()
    except (EngineArgumentError, DeviceSplitError) as error:
        print_error(console, "run", f"--backend: {error}")
        return EXIT_USAGE
    except (EngineUnavailable, RequestFormatError) as error:
        print_error(console, "run", str(error))
        return EXIT_USAGE
    metrics_server: MetricsServer | None = None
    metrics_port: int | None = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        exporter = MetricsObserver(config, runner.run_id)
        observers.append(exporter)  # the runner fans out to this very list
        try:
            metrics_server = _serve_metrics(console, args, metrics_port, exporter.registry)
        except UsageError as error:
            print_error(console, "run", str(error))
            return EXIT_USAGE
    report: RunReport | None = None
    code = EXIT_FAILED
    if leftovers := leftover_engines_warning(engine_processes()):
        print_warning(console, "run", leftovers)
    try:
        try:
            runner.start()
            report = runner.run()
        finally:
            runner.close(grace=shutdown.engine_grace() if shutdown.stop.is_set() else None, hurry=shutdown.hurry)
        code = _finish(console, config, runner, report)
    finally:
        # On success and failure alike: a failed run's push records the failure (and keeps the last good
        # results), and the linger lets Prometheus scrape the final phase and counts.
        gateway: str | None = getattr(args, "pushgateway", None)
        if gateway and not shutdown.hurry.is_set():
            _push(console, shutdown, gateway, config.name, report)
        if metrics_server is not None:
            linger: float | None = getattr(args, "metrics_linger", None)
            _linger(console, shutdown, DEFAULT_LINGER_SECONDS if linger is None else linger)
            metrics_server.close()
    # A signal at any moment, even after the results were written, means the process did not do all it was
    # asked (a push or the linger may have been cut short).
    return shutdown.exit_code or code


def _serve_engine_node(console: Console, args: argparse.Namespace, config: RunConfig, shutdown: Shutdown) -> int | None:
    """In a pod that holds only workers of an engine over several pods, their run's exit code (node rank 0's pod
    runs the benchmark), with --metrics-port the series that says it holds its node; None in any other pod."""
    try:
        nodes = EngineNodes.from_environment()
    except EngineNodesError as error:
        print_error(console, "run", str(error))
        return EXIT_USAGE
    if nodes is None or nodes.rank == 0:
        return None
    print_plain(
        console,
        f"node {nodes.rank} of {nodes.count} of the engine at {nodes.rendezvous}: this pod runs its vLLM workers;"
        " that node's pod runs the benchmark",
    )
    node_args = engine_entry(config.backend.engine).node_args
    if node_args is None:
        print_error(console, "run", f"--backend: engine {config.backend.engine} cannot span several pods")
        return EXIT_USAGE
    metrics = EngineNodeMetrics(config.name, nodes.rank)
    server: MetricsServer | None = None
    metrics_port: int | None = getattr(args, "metrics_port", None)
    if metrics_port is not None:
        try:
            server = _serve_metrics(console, args, metrics_port, metrics.registry)
        except UsageError as error:
            print_error(console, "run", str(error))
            return EXIT_USAGE
    metrics.holds_node(True)
    try:
        outcome = serve_engine_node(nodes, node_args(config.backend, nodes), shutdown.stop)
    finally:
        metrics.holds_node(False)
        if server is not None:
            server.close()
    if outcome.code == 0:
        print_plain(console, outcome.message)
    else:
        print_error(console, "run", outcome.message)
    return shutdown.exit_code or outcome.code


def _serve_metrics(console: Console, args: argparse.Namespace, port: int, registry: CollectorRegistry) -> MetricsServer:
    """--metrics-port's server of ``registry``; UsageError when it cannot listen."""
    address = getattr(args, "metrics_address", "127.0.0.1")
    try:
        server = MetricsServer(registry, port, address)
    except OSError as error:
        raise UsageError(f"--metrics-port: cannot listen on {address}:{port}: {error.strerror or error}") from None
    print_plain(console, f"serving metrics on {server.url}")
    return server


def _judge(config: RunConfig) -> Callable[[RunReport], RegressionReport] | None:
    """The run's verdict against config.baseline in config.store (None: no baseline)."""
    if config.store is None or config.baseline is None:
        return None
    location, baseline = config.store, config.baseline
    return lambda report: judge_in(location, baseline, report)


def _finish(console: Console, config: RunConfig, runner: BenchmarkRunner, report: RunReport) -> int:
    """Write every output, print the summary; the exit code for what happened."""
    failed_outputs = write_reports(report, [Path(output) for output in config.outputs])
    print_summary(output_console(), report)
    if report.regression is not None:
        for entry in report.regression.benchmarks:
            print_plain(console, f"against the baseline {report.regression.baseline}, {describe(entry)}")
        print_plain(console, f"regressed {report.regression.verdict.value}: {report.regression.reason}")
    failures: list[str] = []
    for output in config.outputs:
        if Path(output) in failed_outputs:
            failures.append(f"could not write {output}: {failed_outputs[Path(output)]}")
            print_error(console, "run", failures[-1])
        else:
            print_plain(console, f"wrote {output}")
    store_failure = _store(console, config.store, report) if config.store is not None else None
    if store_failure is not None:
        failures.append(store_failure)
    if runner.failure is not None:
        print_error(console, "run", runner.failure)  # it says "the engine failed…" itself
        return EXIT_ENGINE_FAILED
    if failures:
        record_output_failure(report, "; ".join(failures))
        return EXIT_OUTPUT_FAILED
    return 0


def _store(console: Console, store: str, report: RunReport) -> str | None:
    """Keep the run in the results store; None where it was, else what failed (said here; it costs no other
    output)."""
    try:
        entry = open_store(store).put(report)
    except StoreError as error:
        failure = f"--store: {error}"
        print_error(console, "run", f"{failure}; the results files are unaffected")
        return failure
    print_plain(console, f"stored run {entry.run_id} in {store} ({entry.folder})")
    return None


def _push(console: Console, shutdown: Shutdown, gateway: str, name: str, report: RunReport | None) -> None:
    """Push from a thread, so that a signal ends the wait. A signal during the push abandons it at once; after a
    signal that came earlier, one attempt is made, abandoned at the shutdown deadline."""
    outcome: list[PushOutcome] = []

    def push() -> None:
        outcome.append(push_results(gateway, name, report, give_up=shutdown.stop.is_set, sleep=shutdown.stop.wait))

    received = shutdown.received
    pusher = threading.Thread(target=push, name="batchmark-push", daemon=True)
    pusher.start()
    while pusher.is_alive():
        left = shutdown.seconds_left()
        if shutdown.received != received or (left is not None and left <= 0):
            print_warning(console, "run", f"gave up pushing to the Pushgateway {gateway}: the process is stopping")
            return
        pusher.join(timeout=0.05)
    if not outcome:
        return
    result = outcome[0]
    if result.ok:
        what = "results" if run_succeeded(report) else "the failure (the last good results are kept)"
        print_plain(console, f"pushed {what} to {gateway}")
    else:
        print_warning(
            console,
            "run",
            f"could not push to the Pushgateway {gateway} after {result.attempts} attempts ({result.error}); "
            "the results themselves are unaffected",
        )


def _linger(console: Console, shutdown: Shutdown, seconds: float) -> None:
    """Serve the final values a while longer: a signal during the linger ends it, and after an earlier signal it
    never outlasts the shutdown deadline."""
    left = shutdown.seconds_left()
    if left is not None:
        seconds = min(seconds, left)
    if seconds <= 0:
        return
    print_plain(console, f"serving the final metrics for {seconds:g} s more")
    received = shutdown.received
    deadline = time.monotonic() + seconds
    while shutdown.received == received and time.monotonic() < deadline:
        time.sleep(0.05)
