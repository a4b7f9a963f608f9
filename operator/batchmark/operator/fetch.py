"""``batchmark results NAME``: a finished benchmark's full report, fetched from the cluster, written as
``batchmark run --output`` writes it (the format by each file's extension)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from kubernetes import config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.api import FINISHED_PHASES
from batchmark.operator.kube import Kube, api_client
from batchmark.runner.cli import EXIT_FAILED, EXIT_USAGE, UsageError
from batchmark.runner.console import print_summary
from batchmark.runner.outputs import write_report
from batchmark.runner.results import RunReport
from batchmark.runner.statuswriter import read_report_config_map


def current_namespace() -> str:
    """The namespace of the kubeconfig's current context, as kubectl picks it."""
    try:
        _, context = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
    except (ConfigException, OSError):
        return "default"
    return str((context or {}).get("context", {}).get("namespace") or "default")


def fetch_report(kube: Kube, namespace: str, name: str) -> RunReport:
    found = kube.get_benchmark(namespace, name)
    if found is None:
        raise UsageError(f"no BatchBenchmark {name} in namespace {namespace}")
    status = found.get("status") or {}
    phase = status.get("phase")
    if phase not in FINISHED_PHASES:
        raise UsageError(f"{namespace}/{name} has not finished (phase {phase or 'unknown'}); wait for it first")
    config_map_name = status.get("resultsConfigMap")
    if not config_map_name:
        raise UsageError(
            f"{namespace}/{name} ended {phase} without a full report (its runner wrote no results ConfigMap);"
            " kubectl get bb -o yaml shows the summary in status.results"
        )
    try:
        config_map = kube.get_config_map(namespace, config_map_name)
    except ApiException as error:
        raise UsageError(f"cannot read ConfigMap {namespace}/{config_map_name}: {error.reason}") from None
    try:
        report = read_report_config_map(config_map)
    except (ValidationError, ValueError, OSError) as error:
        raise UsageError(f"ConfigMap {namespace}/{config_map_name} holds no readable report: {error}") from None
    if report is None:
        raise UsageError(
            f"{namespace}/{name} ended {phase} without a full report in ConfigMap {config_map_name} (the runner could "
            "not write it); kubectl get bb -o yaml shows the summary in status.results"
        )
    return report


def results_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    namespace = args.namespace or current_namespace()
    try:
        try:
            kube = Kube(api_client(os.environ.get("KUBECONFIG") if args.kubeconfig is None else args.kubeconfig))
        except (ConfigException, OSError) as error:
            raise UsageError(f"cannot reach the cluster: {error}") from None
        try:
            report = fetch_report(kube, namespace, args.name)
        except ApiException as error:
            console.print(f"[bold red]batchmark results: error:[/] the API server said {error.status} {error.reason}")
            return EXIT_FAILED
        for output in args.output:
            try:
                write_report(report, Path(output))
            except (OSError, ValueError) as error:
                raise UsageError(f"--output: cannot write {output}: {error}") from None
    except UsageError as error:
        console.print(f"[bold red]batchmark results: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    if not args.output:
        print_summary(Console(), report)
    for output in args.output:
        console.print(f"wrote {output}", highlight=False)
    return 0
