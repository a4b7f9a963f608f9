"""``batchmark manifest``: the BatchBenchmark that runs on a cluster what ``batchmark run`` runs here."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.api import API_VERSION, KIND, BatchBenchmarkSpec
from batchmark.runner.config import RunConfig
from batchmark.runner.configload import UsageError, load_config
from batchmark.runner.exitcodes import EXIT_USAGE

# A BatchBenchmark's name also names its Job and labels its pods: a DNS label.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def manifest(config: RunConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The BatchBenchmark for this run config and the pod-relevant run options."""
    if not _DNS_LABEL.match(config.name):
        raise UsageError(
            f"--name: {config.name!r} cannot name a BatchBenchmark: use lower-case letters, digits and '-', "
            "at most 63 characters, starting and ending with a letter or digit"
        )
    benchmark = config.model_dump(
        mode="json", by_alias=True, exclude_none=True, include={"backend", "data", "profile", "constraints"}
    )
    spec: dict[str, Any] = {**benchmark, "sampleRequests": config.sample_requests}
    if args.image:
        spec["image"] = args.image
    metrics: dict[str, Any] = {}
    if args.metrics_port is not None:
        metrics["port"] = args.metrics_port
    if args.pushgateway:
        metrics["pushgateway"] = args.pushgateway
    if metrics:
        spec["metrics"] = metrics
    try:
        BatchBenchmarkSpec.model_validate(spec)
    except ValidationError as error:  # e.g. a --pushgateway that is not a URL
        problem = error.errors()[0]
        raise UsageError(f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None
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
        console.print(f"[bold red]batchmark manifest: error:[/] {error}", highlight=False)
        return EXIT_USAGE
    sys.stdout.write(yaml.safe_dump(document, sort_keys=False))
    return 0
