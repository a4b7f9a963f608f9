"""How fast a benchmark over many pods starts: apply -> JobSet created -> every pod Running -> Succeeded.

Starts its own control plane (devtools/cluster: real kubelets over containerd, the runner image built from the
Dockerfile on its nodes), the real JobSet controller (devtools/cluster/jobset.py) and `batchmark operator` as a real
process, then applies, one after another, `--repeats` simulated benchmarks of `--pods` pods (spec.parallelism,
one replica and one fake GPU a pod: 16 fills the two GPU nodes). For each it records, from 0.1 s polls of the API
server: apply -> the JobSet exists, apply -> every pod Running, apply -> phase Succeeded, and the start skew the
merged results report (from the first pod's start of measurement to the last's). Prints one JSON object with each
figure's repeats, median and spread.

    PYTHONPATH=. .venv/bin/python benchmarks/jobset_start.py --pods 16 --repeats 3

Needs what the containers runtime needs (scripts/setup/cluster.sh, and podman with the images' inputs:
scripts/setup/images.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from kubernetes.client import CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from batchmark.runner.observe.statuswriter import read_report_config_map
from benchmarks.operator_scale import start_operator, stop
from devtools.cluster import images
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.jobset import JobSet, locate_jobset

ROOT = Path(__file__).resolve().parents[1]


def manifest(name: str, pods: int, seconds: float) -> dict[str, Any]:
    return {
        "apiVersion": "batchmark.dev/v1alpha1",
        "kind": "BatchBenchmark",
        "metadata": {"name": name},
        "spec": {
            "backend": {"model": "m", "engine": "simulated", "batchSize": 8, "simulation": {"timeScale": 1.0}},
            "data": {"promptTokens": 32, "outputTokens": 8},
            "profile": {"kind": "throughput", "maxConcurrency": 16},
            "constraints": [{"kind": "max_duration", "seconds": seconds}],
            "parallelism": {"replicas": pods},
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "metrics": {"enabled": False},
        },
    }


def one_start(cluster: ControlPlane, namespace: str, name: str, pods: int, seconds: float) -> dict[str, float]:
    custom = CustomObjectsApi(cluster.api_client())
    core = CoreV1Api(cluster.api_client())
    applied = time.monotonic()
    custom.create_namespaced_custom_object(
        "batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", manifest(name, pods, seconds)
    )
    marks: dict[str, float] = {}
    while time.monotonic() - applied < 600:
        now = time.monotonic() - applied
        if "jobset_s" not in marks:
            try:
                custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
                marks["jobset_s"] = now
            except ApiException as error:
                if error.status != 404:
                    raise
        if "all_running_s" not in marks:
            listed = core.list_namespaced_pod(namespace, label_selector=f"batchmark.dev/benchmark={name}").items
            if sum(pod.status is not None and pod.status.phase == "Running" for pod in listed) == pods:
                marks["all_running_s"] = now
        status = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object("batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", name),
        )
        phase = (status.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            if phase != "Succeeded":
                raise RuntimeError(f"{name} ended {phase}: {status['status'].get('message')}")
            marks["succeeded_s"] = now
            merged = core.read_namespaced_config_map(status["status"]["resultsConfigMap"], namespace)
            report = read_report_config_map(merged.to_dict())
            summary = report.benchmarks[0].replica_summary if report is not None else None
            if summary is not None and summary.start_skew_seconds is not None:
                marks["start_skew_s"] = summary.start_skew_seconds
            break
        time.sleep(0.1)
    return marks


def spread(values: list[float]) -> dict[str, Any]:
    return {
        "runs": [round(value, 2) for value in values],
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="each benchmark's max_duration")
    args = parser.parse_args()
    runner_archive = images.built_archive("runner")
    with tempfile.TemporaryDirectory(prefix="batchmark-jobset-") as directory, ControlPlane(Path(directory)) as cluster:
        cluster.load_images([runner_archive], {images.TAGS["runner"]: images.default_names("runner")})
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml"))
        cluster.wait("--for=condition=Established", "crd/batchbenchmarks.batchmark.dev")
        jobset = JobSet(cluster, locate_jobset())
        jobset.start()
        namespace = "starts"
        cluster.kubectl("create", "namespace", namespace)
        log = (Path(directory) / "operator.log").open("wb")
        operator, _ = start_operator(cluster, log)
        try:
            runs = [
                one_start(cluster, namespace, f"fleet-{index}", args.pods, args.seconds)
                for index in range(args.repeats)
            ]
            figures = {
                "pods": args.pods,
                "repeats": args.repeats,
                "max_duration_s": args.seconds,
                **{
                    key: spread([run[key] for run in runs])
                    for key in ("jobset_s", "all_running_s", "succeeded_s", "start_skew_s")
                },
                "load_average_1m_after": round(os.getloadavg()[0], 1),
            }
            print(json.dumps(figures, indent=2))
        finally:
            stop(operator)
            log.close()
            jobset.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
