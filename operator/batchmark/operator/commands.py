"""The operator's subcommands of ``batchmark``, registered through the ``batchmark.commands`` entry points.

Each ``register_*`` adds one subparser whose ``handler`` runs the command. Only the standard library is imported
here: kopf, the Kubernetes client and the models load when a command that needs them runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from batchmark.runner.config.arguments import port_number

Subparsers = Any  # argparse's _SubParsersAction, which it does not export

log = logging.getLogger(__name__)


def register_crd(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "crd",
        help="print the BatchBenchmark CustomResourceDefinition",
        description="Print the BatchBenchmark CRD (YAML), generated from the API models; "
        "crds/batchmark.dev_batchbenchmarks.yaml is this output.",
    )
    parser.set_defaults(handler=_crd)


def _crd(args: argparse.Namespace) -> int:
    from batchmark.operator.resource.crd import crd_yaml  # noqa: PLC0415 - yaml and the models load only when asked

    sys.stdout.write(crd_yaml())
    return 0


def register_manifest(commands: Subparsers) -> None:
    run = commands.choices["run"]
    parser = commands.add_parser(
        "manifest",
        parents=[run],
        add_help=False,
        help="print a BatchBenchmark for the benchmark that `batchmark run` would run",
        description="Take exactly the options of `batchmark run` (or --config) and print the BatchBenchmark that "
        "runs the same benchmark on a cluster: batchmark manifest ... | kubectl apply -f -. --output, --quiet and "
        "--metrics-address have no meaning in a pod and are left out.",
    )
    parser.add_argument("--namespace", "-n", help="namespace written into the manifest (default: none)")
    parser.add_argument("--image", help="runner image (default: the operator's)")
    parser.add_argument(
        "--data-volume",
        metavar="SPEC",
        help="where the pod reads --data's file from: configMap=NAME or claimName=CLAIM, [mountPath=/data] "
        "(spec.dataVolume); data.path is written as the pod sees it. Required for a file on this machine",
    )
    parser.add_argument(
        "--model-cache",
        metavar="SPEC",
        help="claimName=CLAIM[,mountPath=/models]: a PersistentVolumeClaim of downloaded models and datasets, "
        "HF_HOME in the pod (spec.modelCache; default: the operator's)",
    )
    parser.set_defaults(handler=_manifest)


def _manifest(args: argparse.Namespace) -> int:
    from batchmark.operator.client.manifest import manifest_command  # noqa: PLC0415

    return manifest_command(args)


def register_operator(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "operator",
        help="run the operator (kopf) that turns BatchBenchmarks into Jobs",
        description="Watch BatchBenchmarks (all namespaces, or those given) and run each as a Job; serves "
        "/healthz (kopf's liveness endpoint) and /metrics. Logs in as kubectl does: the service account in a "
        "pod, else the kubeconfig.",
    )
    parser.add_argument(
        "--namespace", action="append", metavar="NS", help="watch this namespace (repeatable; default: all)"
    )
    parser.add_argument("--metrics-address", default="0.0.0.0", help="address of /metrics (default 0.0.0.0)")
    parser.add_argument("--metrics-port", type=port_number, default=8080, help="port of /metrics (default 8080)")
    parser.add_argument("--health-address", default="0.0.0.0", help="address of /healthz (default 0.0.0.0)")
    parser.add_argument("--health-port", type=port_number, default=8081, help="port of /healthz (default 8081)")
    parser.add_argument(
        "--defaults",
        type=Path,
        metavar="FILE",
        help="YAML (OperatorDefaults, camelCase) applied where a spec says nothing",
    )
    parser.set_defaults(handler=_operator)


def _operator(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415

    from batchmark.operator.controller.service import (  # noqa: PLC0415
        DefaultsError,
        OperatorOptions,
        load_defaults,
        run_operator,
    )
    from batchmark.runner.contract import EXIT_USAGE  # noqa: PLC0415
    from batchmark.runner.observe.console import print_error  # noqa: PLC0415

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


def register_results(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "results",
        help="fetch a finished BatchBenchmark's full results from the cluster",
        description="Read the full report of a finished BatchBenchmark (its <name>-results ConfigMap) with the "
        "kubeconfig kubectl would use, and write it as `batchmark run --output` does; without -o, print its summary.",
    )
    parser.add_argument("name", help="the BatchBenchmark")
    parser.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    parser.add_argument(
        "-o",
        "--output",
        action="append",
        default=[],
        help="write to PATH (.json, .yaml, .csv, or .html: a self-contained report; repeatable)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    parser.set_defaults(handler=_results)


def _results(args: argparse.Namespace) -> int:
    from batchmark.operator.client.fetch import results_command  # noqa: PLC0415

    return results_command(args)


def register_submit(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "submit",
        help="create a BatchBenchmark from a manifest (a fresh name each time with metadata.generateName)",
        description="Create the BatchBenchmark of a manifest file, checked first as the operator would check it,"
        " with the kubeconfig kubectl would use (in a pod, its service account). With metadata.generateName the API"
        " server gives each one a fresh name: what the chart's scheduled benchmarks run.",
    )
    parser.add_argument("-f", "--file", required=True, help="the BatchBenchmark manifest (YAML or JSON)")
    parser.add_argument("-n", "--namespace", help="where (default: the manifest's, else the kubeconfig context's)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    parser.set_defaults(handler=_submit)


def _submit(args: argparse.Namespace) -> int:
    from batchmark.operator.client.submit import submit_command  # noqa: PLC0415

    return submit_command(args)
