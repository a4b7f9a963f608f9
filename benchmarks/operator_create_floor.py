"""How fast this machine's API server lets the operator create benchmarks: the floor under apply -> Job.

The operator scale benchmark (operator_scale.py) measures apply -> Job created with everything running: kopf,
the nodes' kubelets and up to 16 benchmark containers. This one asks what the API server alone allows. It starts
its own control plane (devtools/cluster, without nodes, so no benchmark ever runs), applies N BatchBenchmarks as
fast as the API server takes them, and hands each, as soon as it exists, to the operator's own creation path
(``Reconciler.ensure``: the Pending status, the five children, the Job, the Scheduling status) on a pool of
threads, without kopf. Apply -> Job here is the least that apply -> Job can be for the same number of
benchmarks on this machine: no operator that makes the same objects can create the last Job sooner.

    PYTHONPATH=. .venv/bin/python benchmarks/operator_create_floor.py --benchmarks 200 --threads 16,24,48

Prints one JSON object per thread count.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes.client import CustomObjectsApi

from batchmark.operator.controller.kube import Kube, api_client
from batchmark.operator.controller.reconcile import Reconciler
from batchmark.operator.controller.workers import ControllerThreads
from benchmarks.operator_scale import ROOT, manifest, percentile
from devtools.cluster.controlplane import ControlPlane


class TimedKube(Kube):
    """The operator's API access, noting when each benchmark's Job was created."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.job_created: dict[str, float] = {}
        self.calls = 0
        self._lock = threading.Lock()

    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
        return super().request(*args, **kwargs)

    def create(self, manifest: Mapping[str, Any]) -> bool:
        created = super().create(manifest)
        if manifest["kind"] == "Job":
            with self._lock:
                self.job_created[manifest["metadata"]["name"]] = time.monotonic()
        return created


def one_run(cluster: ControlPlane, namespace: str, benchmarks: int, threads: int) -> dict[str, Any]:
    cluster.kubectl("create", "namespace", namespace)
    kube = TimedKube(api_client(str(cluster.kubeconfig), threads + 1))
    reconciler = Reconciler(kube, ControllerThreads())
    api = CustomObjectsApi(cluster.api_client())
    applied: dict[str, float] = {}
    load_before = os.getloadavg()
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = []
        for index in range(benchmarks):
            name = f"bb-{index:03d}"
            body = cast(
                "dict[str, Any]",
                api.create_namespaced_custom_object(
                    "batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", manifest(name, 40, None)
                ),
            )
            applied[name] = time.monotonic()
            futures.append(pool.submit(reconciler.ensure, body))
        applies_done = time.monotonic() - started
        for future in futures:
            future.result()
    finished = time.monotonic() - started
    to_job = [kube.job_created[name] - applied[name] for name in applied]
    return {
        "benchmarks": benchmarks,
        "threads": threads,
        "apply_all_s": round(applies_done, 2),
        "last_job_s": round(finished, 2),
        "apply_to_job_p50_s": round(statistics.median(to_job), 3),
        "apply_to_job_p99_s": round(percentile(to_job, 0.99), 3),
        "operator_calls": kube.calls,
        "operator_calls_per_s": round(kube.calls / finished, 1),
        "load_average_1m_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", type=int, default=200)
    parser.add_argument("--threads", default="16", help="comma-separated thread counts, one run each")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="batchmark-floor-") as directory,
        ControlPlane(Path(directory), runtime="no-nodes") as cluster,
    ):
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml"))
        cluster.wait("--for=condition=Established", "crd/batchbenchmarks.batchmark.dev")
        for threads in (int(value) for value in args.threads.split(",")):
            print(json.dumps(one_run(cluster, f"floor-{threads}", args.benchmarks, threads)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
