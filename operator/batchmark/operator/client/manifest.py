"""``batchmark manifest``: the BatchBenchmark that runs on a cluster what ``batchmark run`` runs here.

The spec holds what the user chose (the options given, the keys of --config), not every default: the models
and the CRD give the defaults back, so it runs the same benchmark.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.client.names import dns_label
from batchmark.operator.resource.api import API_VERSION, KIND, BatchBenchmarkSpec
from batchmark.runner.config.load import UsageError, load_config
from batchmark.runner.config.run import RunConfig
from batchmark.runner.contract import EXIT_USAGE
from batchmark.runner.observe.console import print_error

# What a pod runs as `batchmark run` options; --output, --quiet and --metrics-address are the laptop's (README,
# `batchmark manifest`), and the pod's own are set by the operator.
_BENCHMARK_FIELDS = {"backend", "data", "profile", "constraints", "sample_requests", "sweep", "slo", "cost", "repeats"}


def manifest(config: RunConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The BatchBenchmark for this run config and the pod-relevant run options."""
    dns_label("--name", config.name, "a BatchBenchmark")
    if args.namespace:
        dns_label("--namespace", args.namespace, "a namespace")
    spec: dict[str, Any] = config.model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True, include=_BENCHMARK_FIELDS
    )
    if not spec.get("slo"):
        spec.pop("slo", None)  # no budget: the spec leaves it out
    if args.image is not None:
        spec["image"] = args.image
    metrics: dict[str, Any] = {}
    if args.metrics_port is not None:
        metrics["port"] = args.metrics_port
    if args.pushgateway:
        metrics["pushgateway"] = args.pushgateway
    if args.metrics_linger is not None:
        metrics["lingerSeconds"] = args.metrics_linger
    if metrics:
        spec["metrics"] = metrics
    try:
        BatchBenchmarkSpec.model_validate(spec)
    except ValidationError as error:  # e.g. a --pushgateway that is not a URL
        problem = error.errors()[0]
        raise UsageError(
            f"{'.'.join(map(str, problem['loc']))}: {problem['msg'].removeprefix('Value error, ')}"
        ) from None
    metadata: dict[str, Any] = {"name": config.name}
    if args.namespace:
        metadata["namespace"] = args.namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def manifest_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        config = load_config(args)
        document = manifest(config, args)
    except UsageError as error:
        print_error(console, "manifest", str(error))
        return EXIT_USAGE
    sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    return 0
