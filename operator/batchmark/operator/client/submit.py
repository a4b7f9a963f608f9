"""``batchmark submit -f FILE``: create a BatchBenchmark from a manifest, a fresh name each time where it gives
``metadata.generateName``: what the chart's scheduled benchmarks run (a CronJob's pod, with a service account
that may create BatchBenchmarks and nothing else), and what a person runs to start the same benchmark again.

Everything is checked before the request: the file (read with a config file's bounds), that it is one
BatchBenchmark of this API version, its names, and its spec against the operator's own model. Exit code 2 for bad
input, 5 when the API server cannot be reached or refuses.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.client.fetch import (
    ClusterError,
    api_errors,
    check_kubeconfig,
    connect,
    context_namespace,
    find_kubeconfig,
)
from batchmark.operator.client.names import dns_label, dns_subdomain
from batchmark.operator.resource.api import API_VERSION, KIND, PLURAL, BatchBenchmarkSpec
from batchmark.runner.config.load import UsageError
from batchmark.runner.config.safeload import UnusableFile, read_document
from batchmark.runner.contract import EXIT_CLUSTER, EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain

# What the API server adds to a generateName: five characters.
_GENERATED_SUFFIX = 5


def read_manifest(path: Path) -> dict[str, Any]:
    """The BatchBenchmark in ``path``, checked as the API server and the operator would check it."""
    try:
        document = read_document(path, "--file", "a BatchBenchmark manifest")
    except UnusableFile as error:
        raise UsageError(str(error)) from None
    if not isinstance(document, dict):
        raise UsageError(f"--file: {path}: not a manifest: it holds no mapping")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise UsageError(
            f"--file: {path}: not a {KIND} of {API_VERSION} (apiVersion {document.get('apiVersion')!r},"
            f" kind {document.get('kind')!r})"
        )
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise UsageError(f"--file: {path}: metadata: give name or generateName")
    name, generated = metadata.get("name"), metadata.get("generateName")
    if (name is None) == (generated is None):
        raise UsageError(f"--file: {path}: metadata: give one of name or generateName")
    if name is not None:
        dns_label("--file: metadata.name", str(name), "a BatchBenchmark")
    else:
        # The API server's suffix is five letters or digits; what it is appended to must leave a DNS label.
        dns_label("--file: metadata.generateName", f"{generated}x", "the start of a BatchBenchmark's name")
        if len(str(generated)) > 63 - _GENERATED_SUFFIX:
            raise UsageError(f"--file: metadata.generateName: {generated!r} leaves no room for the generated suffix")
    try:
        BatchBenchmarkSpec.model_validate(document.get("spec") or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"])) or "(spec)"
        raise UsageError(
            f"--file: {path}: spec.{where}: {first['msg'].removeprefix('Value error, ')}"
            f" ({error.error_count()} problem{'s' if error.error_count() > 1 else ''})"
        ) from None
    return document


def submit_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        manifest = read_manifest(Path(args.file))
        if args.namespace is not None:
            dns_label("--namespace", args.namespace, "a namespace")
        given = (manifest["metadata"] or {}).get("namespace")
        if given is not None:
            dns_subdomain("--file: metadata.namespace", str(given), "a namespace")
        kubeconfig = find_kubeconfig(args.kubeconfig)
        check_kubeconfig(kubeconfig)
        namespace = args.namespace or given or context_namespace(kubeconfig)
        kube, server = connect(kubeconfig)
        body = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
        with api_errors(server):
            created = kube.request("POST", f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}", body)
    except UsageError as error:
        print_error(console, "submit", str(error))
        return EXIT_USAGE
    except ClusterError as error:
        print_error(console, "submit", str(error))
        return EXIT_CLUSTER
    print_plain(Console(), f"batchbenchmark.batchmark.dev/{created['metadata']['name']} created in {namespace}")
    return 0
