"""The operator–runner contract: everything a BatchBenchmark's operator and the runner in its pod agree on.

The operator writes a pod; the runner in it reads its config, reports to its resource and exits. Each side
names the other's half of that exchange from here, so a rename is one edit and a test catches a mismatch:

- the resource: its API group, version, kind and plural;
- the pod: the environment variables that tell the runner which resource it reports to, the path its config
  is mounted at, where its termination message goes;
- the ConfigMaps: the key the config is stored under, the keys of the full report in the results ConfigMap;
- the exit codes of ``batchmark run``, which the operator reads back as the benchmark's outcome;
- the status: which fields each side writes (one writer per field), as data both sides check their writes
  against.

It lives on the runner's side because the runner must never import the operator (the runner image ships
without it, and a laptop run needs none of it); the operator already builds on the runner's models. It
imports nothing, so either side can load it anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# --- the resource ------------------------------------------------------------------------------------------

GROUP: Final = "batchmark.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "BatchBenchmark"
PLURAL: Final = "batchbenchmarks"

# --- the pod -----------------------------------------------------------------------------------------------

# Set by the operator on every benchmark pod; with them the runner's status writer switches itself on.
ENV_NAMESPACE: Final = "BATCHMARK_RESOURCE_NAMESPACE"
ENV_NAME: Final = "BATCHMARK_RESOURCE_NAME"
ENV_UID: Final = "BATCHMARK_RESOURCE_UID"
# Not set by the operator: the runner names the ConfigMap it creates for its report after its pod
# (``<pod>-results``); this overrides that name (a runner started by hand).
ENV_RESULTS: Final = "BATCHMARK_RESULTS_CONFIGMAP"
ENV_POD: Final = "BATCHMARK_POD_NAME"
ENV_TERMINATION: Final = "BATCHMARK_TERMINATION_MESSAGE_PATH"
POD_ENVIRONMENT: Final = (
    ENV_NAMESPACE,
    ENV_NAME,
    ENV_UID,
    ENV_POD,
    ENV_TERMINATION,
)

# Set by the operator on each pod of a benchmark over several pods (a JobSet): this pod's index (0 to count - 1),
# the count, and pod 0's stable name. Each pod's runner writes its own results ConfigMap and termination message;
# the others send their reports to pod 0 (on MEMBER_REPORT_PORT), which alone writes the status: its progress,
# and at the end the pods' merged results (batchmark.runner.observe.members).
ENV_MEMBER: Final = "BATCHMARK_MEMBER_INDEX"
ENV_MEMBERS: Final = "BATCHMARK_MEMBERS"
ENV_LEADER: Final = "BATCHMARK_LEADER"
MEMBER_REPORT_PORT: Final = 8471
# Set as well where each engine replica spans several pods (spec.parallelism.nodesPerReplica): how many, and how
# any member's stable name is made from its index (``{member}`` in it). Members i..i+n-1 are the n nodes of one
# engine, member i its node rank 0: it runs the benchmark and vLLM's engine, whose rendezvous listens on
# ENGINE_RENDEZVOUS_PORT; the others run only vLLM's workers (batchmark.runner.engines.engine_nodes).
ENV_ENGINE_NODES: Final = "BATCHMARK_ENGINE_NODES"
ENV_MEMBER_ADDRESS: Final = "BATCHMARK_MEMBER_ADDRESS"
ENGINE_RENDEZVOUS_PORT: Final = 29501

# Set by the operator where spec.dataVolume is mounted: a relative data.path is read from under it, so the same
# spec (path: prompts.jsonl) runs on a laptop (from the working folder) and in the pod.
ENV_DATA_DIRECTORY: Final = "BATCHMARK_DATA_DIR"

# The config ConfigMap is mounted as a folder; the runner runs `batchmark run --config CONFIG_PATH`.
CONFIG_DIRECTORY: Final = "/etc/batchmark"
CONFIG_KEY: Final = "config.yaml"
CONFIG_PATH: Final = f"{CONFIG_DIRECTORY}/{CONFIG_KEY}"
# Kubernetes' default: the runner writes its compact summary there, the operator reads it from the pod's status.
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
# spec.results.store's claim is mounted here; the run's config names the store's folder under it.
STORE_MOUNT_PATH: Final = "/var/lib/batchmark/store"
# The user and group the runner image's user has (docker/Dockerfile's BATCHMARK_UID/BATCHMARK_GID build
# arguments), which the operator's Job runs the pod as (fsGroup: its volumes writable by that group); the chart's
# operator Deployment uses the same numbers (tests/unit/images/test_runner_identity.py checks all three).
RUNNER_UID: Final = 10001
RUNNER_GID: Final = 10001

# --- the results ConfigMap ---------------------------------------------------------------------------------

# The full report: plain JSON under `data`, or gzip-compressed under `binaryData` when it would not fit.
REPORT_KEY: Final = "report.json"
COMPRESSED_REPORT_KEY: Final = "report.json.gz"

# --- exit codes of `batchmark run` -------------------------------------------------------------------------

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1  # an unexpected error
EXIT_USAGE: Final = 2  # bad input, found before any work: the operator fails the benchmark at once
EXIT_ENGINE_FAILED: Final = 3
EXIT_OUTPUT_FAILED: Final = 4
EXIT_SIGNAL_BASE: Final = 128  # 128 + N: stopped by signal N
# `batchmark results` only, no part of the pod's contract; named here so that no two commands give one code two
# meanings: the cluster's API server could not be reached, or refused the request.
EXIT_CLUSTER: Final = 5
# `batchmark compare --baseline` only: a candidate regressed against its baseline (significant and beyond the
# threshold), so that a CI pipeline can gate on it.
EXIT_REGRESSED: Final = 6

# --- the status: one writer per field ----------------------------------------------------------------------

# resultsConfigMap: the ConfigMap the runner created for its full report (one per attempt, the latest named).
# regression: the run against spec.baseline, from which the operator sets the Regressed condition.
# runnerImage (the operator's): the current pod's runner image as its kubelet reports it, which the runner reads
# back into its report (in its pod it cannot learn its image's digest).
RUNNER_STATUS_FIELDS: Final = frozenset(
    {"progress", "engine", "results", "headline", "runId", "resultsConfigMap", "regression"}
)
OPERATOR_STATUS_FIELDS: Final = frozenset(
    {
        "phase",
        "reason",
        "message",
        "conditions",
        "observedGeneration",
        "jobName",
        "podName",
        "nodeName",
        "startTime",
        "completionTime",
        "attempts",
        "replicas",
        "preemptions",
        "queue",
        "runnerImage",
    }
)
# The runner's end-of-run fields, which the operator writes only when the run finished and the runner could not:
# then they come from the pod's termination message.
OPERATOR_FALLBACK_FIELDS: Final = frozenset({"engine", "results", "headline", "runId"})


class NotOwnedStatusFieldError(ValueError):
    """A write to a status field the other side owns: a bug in the writer, caught before it reaches the API."""


def check_status_writes(writer: str, fields: Iterable[str], owned: frozenset[str]) -> None:
    """Refuse a status patch that names a field ``writer`` does not own."""
    foreign = sorted(set(fields) - owned)
    if foreign:
        raise NotOwnedStatusFieldError(f"the {writer} may not write status field(s) {', '.join(foreign)}")
