"""``batchmark results NAME``: a finished benchmark's full report, fetched from the cluster, written as
``batchmark run --output`` writes it (the format by each file's extension).

Everything the user gave is checked before the first request: the names (Kubernetes' rules), every output path,
the kubeconfig files (read with the same bounds as a config file). The cluster's answers are then reported in one
line each: exit code 2 for bad input, 5 when the API server cannot be reached or refuses, 4 when an output
cannot be written after all.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import ValidationError
from rich.console import Console

from batchmark.operator.client.names import dns_label, dns_subdomain
from batchmark.operator.controller.kube import Kube
from batchmark.operator.resource.status import FINISHED_PHASES
from batchmark.runner.config.load import UsageError
from batchmark.runner.config.output_paths import output_problem
from batchmark.runner.config.run import OUTPUT_EXTENSIONS
from batchmark.runner.config.safeload import UnusableFile, read_document
from batchmark.runner.contract import EXIT_CLUSTER, EXIT_OUTPUT_FAILED, EXIT_USAGE
from batchmark.runner.observe.console import print_error, print_plain, print_summary
from batchmark.runner.observe.statuswriter import read_report_config_map
from batchmark.runner.results.outputs import write_report
from batchmark.runner.results.report import RunReport

# A server that accepts the connection and never answers must not hang the command; one that refuses is told at
# once. Seconds to connect, then to read each answer.
CONNECT_SECONDS = 5.0
READ_SECONDS = 30.0
RETRIES = 1


class ClusterError(Exception):
    """The API server could not be reached or refused the request: printed as one message, exit code 5."""


@dataclass(frozen=True)
class Kubeconfig:
    """Where the login comes from, as kubectl finds it: --kubeconfig, else KUBECONFIG (a list of files), else
    ~/.kube/config; ``paths`` empty inside a pod without one (its service account)."""

    option: str
    paths: tuple[Path, ...]

    @property
    def argument(self) -> str | None:
        return os.pathsep.join(str(path) for path in self.paths) if self.paths else None

    def describe(self) -> str:
        return f"{self.option} {', '.join(map(str, self.paths))}" if self.paths else "the pod's service account"


def find_kubeconfig(given: str | None) -> Kubeconfig:
    if given is not None:
        return Kubeconfig("--kubeconfig", (Path(given),))
    listed = [Path(part) for part in os.environ.get("KUBECONFIG", "").split(os.pathsep) if part]
    if listed:
        return Kubeconfig("KUBECONFIG", tuple(listed))
    default = Path.home() / ".kube" / "config"
    if default.exists() or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return Kubeconfig("kubeconfig", (default,))
    return Kubeconfig("in-cluster", ())


def check_kubeconfig(kubeconfig: Kubeconfig) -> None:
    """Each file readable and a YAML mapping of bounded size, so the client never meets what it would crash on."""
    for path in kubeconfig.paths:
        try:
            document = read_document(path, kubeconfig.option, "a kubeconfig")
        except UnusableFile as error:
            raise UsageError(str(error)) from None
        if not isinstance(document, dict):
            raise UsageError(
                f"{kubeconfig.option}: {path}: not a kubeconfig: it holds no mapping of clusters, users and contexts"
            )


def context_namespace(kubeconfig: Kubeconfig) -> str:
    """The namespace of the kubeconfig's current context, as kubectl picks it; the pod's own inside a pod."""
    if not kubeconfig.paths:
        try:
            return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip() or "default"
        except OSError:
            return "default"
    try:
        _, context = config.list_kube_config_contexts(config_file=kubeconfig.argument)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{kubeconfig.describe()}: not a usable kubeconfig: {error}") from None
    return str(((context or {}).get("context") or {}).get("namespace") or "default")


class _BoundedApiClient(client.ApiClient):
    """The official client with every call bounded in time (it waits forever by default)."""

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        timeout = _request_timeout or (CONNECT_SECONDS, READ_SECONDS)
        return super().call_api(method, url, header_params, body, post_params, _request_timeout=timeout)


def connect(kubeconfig: Kubeconfig) -> tuple[Kube, str]:
    """A client logged in as kubectl would be, and the API server's address."""
    configuration = client.Configuration()
    try:
        if kubeconfig.paths:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig.argument, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError, AttributeError, ValueError) as error:
        raise UsageError(f"{kubeconfig.describe()}: not a usable kubeconfig: {error}") from None
    configuration.retries = RETRIES
    return Kube(_BoundedApiClient(configuration)), str(configuration.host)


def check_outputs(outputs: list[str]) -> None:
    for output in outputs:
        if not output.lower().endswith(OUTPUT_EXTENSIONS):
            raise UsageError(f"--output: {output}: the file name must end in one of {', '.join(OUTPUT_EXTENSIONS)}")
        problem = output_problem(Path(output))
        if problem is not None:
            raise UsageError(f"--output: {output}: {problem}")


def fetch_report(kube: Kube, server: str, namespace: str, name: str) -> RunReport:
    with api_errors(server):
        found = kube.get_benchmark(namespace, name)
        if found is None:
            raise UsageError(f"no BatchBenchmark {name} in namespace {namespace} on {server}")
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
        config_map = kube.get_config_map(namespace, config_map_name)
    try:
        report = read_report_config_map(config_map)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"])) or "(document)"
        raise UsageError(
            f"ConfigMap {namespace}/{config_map_name} holds no readable report ({error.error_count()} problems; "
            f"first: {where}: {first['msg']})"
        ) from None
    except (ValueError, OSError) as error:
        raise UsageError(f"ConfigMap {namespace}/{config_map_name} holds no readable report: {error}") from None
    if report is None:
        raise UsageError(
            f"{namespace}/{name} ended {phase} without a full report in ConfigMap {config_map_name} (the runner could "
            "not write it); kubectl get bb -o yaml shows the summary in status.results"
        )
    return report


@contextmanager
def api_errors(server: str) -> Iterator[None]:
    """The client's errors as ClusterError: the server refused (its status), or could not be reached (why)."""
    try:
        yield
    except ApiException as error:
        raise ClusterError(f"the API server {server} refused: {error.status} {error.reason}") from None
    except urllib3.exceptions.HTTPError as error:
        raise ClusterError(f"cannot reach the API server {server}: {reason_of(error)}") from None


def reason_of(error: urllib3.exceptions.HTTPError) -> str:
    """urllib3's innermost reason, without the object addresses it prints."""
    cause: BaseException = error
    while isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
        cause = cause.reason
    return str(cause).rpartition(">: ")[2] or type(cause).__name__


def results_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        name = dns_subdomain("NAME", args.name, "a BatchBenchmark")
        if args.namespace is not None:
            dns_label("--namespace", args.namespace, "a namespace")
        check_outputs(args.output)
        kubeconfig = find_kubeconfig(args.kubeconfig)
        check_kubeconfig(kubeconfig)
        namespace = args.namespace or context_namespace(kubeconfig)
        kube, server = connect(kubeconfig)
        report = fetch_report(kube, server, namespace, name)
    except UsageError as error:
        print_error(console, "results", str(error))
        return EXIT_USAGE
    except ClusterError as error:
        print_error(console, "results", str(error))
        return EXIT_CLUSTER
    if not args.output:
        print_summary(Console(), report)
    code = 0
    for output in args.output:
        try:
            write_report(report, Path(output))
        except (OSError, ValueError) as error:
            print_error(console, "results", f"could not write {output}: {error}")
            code = EXIT_OUTPUT_FAILED
        else:
            print_plain(console, f"wrote {output}")
    return code
