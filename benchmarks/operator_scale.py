"""The operator under load: N BatchBenchmarks applied at once on the local control plane's 16 fake GPUs.

Starts its own control plane (devtools/cluster: its nodes real kubelets over containerd, the runner image built from
the Dockerfile and put on them, so each benchmark runs in a container of it) and `batchmark operator` as a real
process, creates N simulated benchmarks (one GPU each, short runs) as fast as the API server takes them, and
records from watches: apply -> Job created, Job finished -> phase Succeeded (both also from the objects' own
timestamps, whole seconds, which no lag of this script's watches can inflate), the time to drain all, how many ran
at once, and the operator's peak RSS (VmHWM) and CPU seconds (user + system, all its threads: its own cost,
whatever else the machine runs), its reconciles (count and mean duration, from its /metrics), and the load average
before and after. Prints one JSON object.

--profile FILE attaches py-spy to the operator (sampling from outside, non-blocking) and writes its stacks in
py-spy's raw (collapsed) format, to see where the operator's time goes.

With --kueue, the real Kueue (devtools/cluster/kueue.py) admits them instead: a ClusterQueue with as many GPUs
of quota as the nodes have (16), the benchmarks queued in its LocalQueue (spec.queueName); it also records
apply -> admitted (Kueue unsuspends the Job) and apply -> phase Succeeded.

    PYTHONPATH=. .venv/bin/python benchmarks/operator_scale.py --benchmarks 200
    PYTHONPATH=. .venv/bin/python benchmarks/operator_scale.py --benchmarks 200 --kueue

Needs what the containers runtime needs (scripts/setup/cluster.sh, and podman with the images' inputs:
scripts/setup/images.sh).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from kubernetes import watch
from kubernetes.client import BatchV1Api, CoreV1Api, CustomObjectsApi
from prometheus_client.parser import text_string_to_metric_families

from devtools.cluster import images
from devtools.cluster.controlplane import ControlPlane, free_port
from devtools.cluster.kueue import Kueue, cluster_queue, local_queue, resource_flavor

ROOT = Path(__file__).resolve().parents[1]


def manifest(name: str, requests: int, queue: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batchmark.dev/v1alpha1",
        "kind": "BatchBenchmark",
        "metadata": {"name": name},
        "spec": {
            "backend": {"model": "m", "engine": "simulated", "batchSize": 8, "simulation": {"timeScale": 0}},
            "data": {"promptTokens": 32, "outputTokens": 8},
            "profile": {"kind": "throughput", "maxConcurrency": 16},
            "constraints": [{"kind": "max_requests", "count": requests}],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "metrics": {"enabled": False},
        },
    }
    if queue is not None:
        body["spec"]["queueName"] = queue
    return body


def percentile(values: list[float], level: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(level * (len(ordered) - 1)))]


class Recorder:
    """Watches Jobs, pods and BatchBenchmarks of one namespace; notes when each thing was first seen."""

    def __init__(self, cluster: ControlPlane, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.job_created: dict[str, float] = {}
        self.job_admitted: dict[str, float] = {}  # first seen unsuspended
        self.job_finished: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.failed: dict[str, str] = {}  # name -> the status message
        self.running_pods: set[str] = set()
        self.max_running = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._jobs, daemon=True),
            threading.Thread(target=self._pods, daemon=True),
            threading.Thread(target=self._benchmarks, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _stream(self, function: Any, *arguments: Any) -> Any:
        # Each restart of a watch resumes from the last resourceVersion seen: a fresh listing would replay every
        # object, and "at once" counted over a half-replayed listing mixes two moments (it once read 27 of 16).
        version: str | None = None
        while not self.stop.is_set():
            watcher = watch.Watch()  # type: ignore[no-untyped-call]
            resume = {"resource_version": version} if version else {}
            try:
                for event in watcher.stream(function, *arguments, timeout_seconds=30, **resume):  # type: ignore[no-untyped-call]
                    version = watcher.resource_version
                    yield event
            except Exception:
                version = None  # e.g. 410 Gone: list afresh
                time.sleep(0.2)

    def _jobs(self) -> None:
        api = BatchV1Api(self.cluster.api_client())
        for event in self._stream(api.list_namespaced_job, self.namespace):
            job = event["object"]
            now = time.monotonic()
            name = job.metadata.name
            with self.lock:
                self.job_created.setdefault(name, now)
                if not job.spec.suspend:
                    self.job_admitted.setdefault(name, now)
                conditions = (job.status.conditions if job.status else None) or []
                if any(c.type == "Complete" and c.status == "True" for c in conditions):
                    self.job_finished.setdefault(name, now)

    def _pods(self) -> None:
        api = CoreV1Api(self.cluster.api_client())
        for event in self._stream(api.list_namespaced_pod, self.namespace):
            pod = event["object"]
            with self.lock:
                if pod.status and pod.status.phase == "Running" and event["type"] != "DELETED":
                    self.running_pods.add(pod.metadata.name)
                else:
                    self.running_pods.discard(pod.metadata.name)
                self.max_running = max(self.max_running, len(self.running_pods))

    def _benchmarks(self) -> None:
        api = CustomObjectsApi(self.cluster.api_client())
        for event in self._stream(
            api.list_namespaced_custom_object, "batchmark.dev", "v1alpha1", self.namespace, "batchbenchmarks"
        ):
            body = event["object"]
            status = body.get("status") or {}
            with self.lock:
                if status.get("phase") == "Succeeded":
                    self.succeeded.setdefault(body["metadata"]["name"], time.monotonic())
                elif status.get("phase") in ("Failed", "Cancelled"):
                    self.failed.setdefault(body["metadata"]["name"], str(status.get("message", "")))

    def ended(self) -> int:
        with self.lock:
            return len(self.succeeded) + len(self.failed)


def process_status(pid: int, field: str) -> int:
    """A number of /proc/PID/status (kB for memory)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_rss_mb(pid: int) -> float:
    return process_status(pid, "VmHWM") / 1024


class MemorySampler:
    """The operator's RSS and thread count every half second, beside what the recorder had seen by then: where in
    the run its peak falls (the burst of applies, the drain, or the end)."""

    def __init__(self, pid: int, recorder: Recorder, applied: dict[str, float], started: float) -> None:
        self.pid, self.recorder, self.applied, self.started = pid, recorder, applied, started
        self.samples: list[dict[str, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.wait(0.5):
            try:
                rss, threads = process_status(self.pid, "VmRSS"), process_status(self.pid, "Threads")
            except (OSError, KeyError):
                return
            with self.recorder.lock:
                jobs, succeeded = len(self.recorder.job_created), len(self.recorder.succeeded)
            self.samples.append(
                {
                    "t_s": round(time.monotonic() - self.started, 1),
                    "rss_mb": round(rss / 1024, 1),
                    "threads": threads,
                    "applied": len(self.applied),
                    "jobs": jobs,
                    "succeeded": succeeded,
                }
            )

    def figures(self) -> dict[str, Any]:
        self.stop.set()
        self.thread.join()
        if not self.samples:
            return {}
        peak = max(self.samples, key=lambda sample: sample["rss_mb"])
        # One sample in twenty seconds, and the peak's: the shape of the run without a thousand lines.
        every = [sample for index, sample in enumerate(self.samples) if index % 40 == 0]
        return {"operator_rss_peak_sample": peak, "operator_rss_timeline": every}


# What the API server's audit log records here: the creations of benchmarks and of their Jobs, at Metadata level
# (no bodies), so that apply -> Job can be read from the API server's own clock.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [
                {"group": "batchmark.dev", "resources": ["batchbenchmarks"]},
                {"group": "batch", "resources": ["jobs"]},
                {"group": "", "resources": ["configmaps", "serviceaccounts"]},
                {"group": "rbac.authorization.k8s.io", "resources": ["roles", "rolebindings"]},
            ],
        },
        # The operator's first write of a benchmark's status (Pending), one of its first round of calls.
        {
            "level": "Metadata",
            "verbs": ["patch"],
            "resources": [{"group": "batchmark.dev", "resources": ["batchbenchmarks/status"]}],
        },
        {"level": "None"},
    ],
}


def audited_figures(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    """Apply -> Job from the API server's audit log, microseconds, no watcher's lag in it: from the moment the
    BatchBenchmark's creation was answered (stored) to the moment the Job's was, split where the operator's
    create call of the Job reached the API server: before it, the watch event's way to the operator and the
    operator's own work (its kopf, its handler, its other calls of that round); after it, the API server's
    handling of that call (admission, storage)."""
    stored: dict[str, float] = {}
    job_received: dict[str, float] = {}
    job_stored: dict[str, float] = {}
    # Each request of the operator's first round for an object of the benchmark's (its children's names start
    # with the benchmark's): when the round began to reach the API server.
    requests: list[tuple[str, float]] = []
    for line in cluster.layout.audit_log.read_text().splitlines():
        event = json.loads(line)
        reference = event.get("objectRef") or {}
        if reference.get("namespace") != namespace or (event.get("responseStatus") or {}).get("code") not in (200, 201):
            continue
        name, resource = reference.get("name", ""), reference.get("resource")
        if resource == "batchbenchmarks" and event["verb"] == "create":
            stored[name] = epoch_seconds(event["stageTimestamp"])
            continue
        requests.append((name, epoch_seconds(event["requestReceivedTimestamp"])))
        if resource == "jobs":
            job_received[name] = epoch_seconds(event["requestReceivedTimestamp"])
            job_stored[name] = epoch_seconds(event["stageTimestamp"])
    names = [name for name in stored if name in job_stored]
    if not names:
        return {}
    round_began: dict[str, float] = {}
    for child, received in requests:
        owner = child
        while owner not in stored and "-" in owner:
            owner = owner.rsplit("-", 1)[0]
        if owner in stored:
            round_began[owner] = min(round_began.get(owner, received), received)
    to_job = [job_stored[name] - stored[name] for name in names]
    to_request = [job_received[name] - stored[name] for name in names]
    in_server = [job_stored[name] - job_received[name] for name in names]
    to_round = [round_began[name] - stored[name] for name in names]
    round_to_job = [job_received[name] - round_began[name] for name in names]
    slowest = sorted(names, key=lambda name: job_stored[name] - stored[name])[-3:]
    # The slowest apply -> Job of the benchmarks applied in each second of the burst: a tail in its first seconds
    # is the operator warming up (threads, connections), one spread over it is load.
    first = min(stored.values())
    by_second: dict[int, float] = {}
    for name in names:
        second = int(stored[name] - first)
        by_second[second] = max(by_second.get(second, 0.0), job_stored[name] - stored[name])
    return {
        "audited_apply_to_job_p50_s": round(statistics.median(to_job), 3),
        "audited_apply_to_job_p99_s": round(percentile(to_job, 0.99), 3),
        "audited_apply_to_job_max_s": round(max(to_job), 3),
        "audited_apply_to_job_request_p50_s": round(statistics.median(to_request), 3),
        "audited_apply_to_job_request_p99_s": round(percentile(to_request, 0.99), 3),
        # The request part split: until the operator's first call for the benchmark (the watch event's way, kopf,
        # its handler's thread and checks), then until the Job's call (the creators' threads and their queue).
        "audited_apply_to_first_call_p50_s": round(statistics.median(to_round), 3),
        "audited_apply_to_first_call_p99_s": round(percentile(to_round, 0.99), 3),
        "audited_first_call_to_job_call_p50_s": round(statistics.median(round_to_job), 3),
        "audited_first_call_to_job_call_p99_s": round(percentile(round_to_job, 0.99), 3),
        "audited_job_create_in_api_server_p50_s": round(statistics.median(in_server), 3),
        "audited_job_create_in_api_server_p99_s": round(percentile(in_server, 0.99), 3),
        "audited_apply_to_job_max_by_second_of_burst": [round(by_second[second], 2) for second in sorted(by_second)],
        # The three slowest, each split: (to the operator's first call, to its Job call, in the API server), and
        # when it was applied.
        "audited_slowest": {
            name: [
                round(round_began[name] - stored[name], 3),
                round(job_received[name] - round_began[name], 3),
                round(job_stored[name] - job_received[name], 3),
                f"applied {round(stored[name] - min(stored.values()), 1)} s after the first",
            ]
            for name in slowest
        },
    }


def reconcile_figures(metrics_port: int) -> tuple[int, float]:
    """From the operator's /metrics: reconciles done (all outcomes) and their mean duration, seconds."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    count = total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "batchmark_operator_reconcile_duration_seconds":
            for sample in family.samples:
                if sample.name.endswith("_count"):
                    count += sample.value
                elif sample.name.endswith("_sum"):
                    total += sample.value
    return int(count), total / count if count else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process so far (all threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def epoch_seconds(value: str) -> float:
    """An API server timestamp (RFC 3339: an object's whole seconds, an audit event's microseconds) as seconds since
    the epoch."""
    return datetime.datetime.fromisoformat(value).timestamp()


def stamp(value: str | None) -> float | None:
    """An object's timestamp, where it has one, as seconds since the epoch."""
    return epoch_seconds(value) if value else None


def api_requests(cluster: ControlPlane) -> dict[str, int]:
    """The API server's requests so far by verb and resource (its ``apiserver_request_total``, summed over
    codes and scopes), the most first: what the operator, the controllers, the kubelets and the runners
    together ask of it under load."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(cluster.kubectl("get", "--raw", "/metrics").stdout):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            key = f"{labels.get('verb')} {labels.get('group') or 'core'}/{labels.get('resource')}"
            if labels.get("subresource"):
                key += f"/{labels['subresource']}"
            counts[key] = counts.get(key, 0) + int(sample.value)
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def api_waits(cluster: ControlPlane) -> dict[str, dict[str, float]]:
    """Mean seconds per request so far: in the API server as a whole by verb and resource (its
    ``apiserver_request_duration_seconds``), and queued by its flow control by priority level
    (``apiserver_flowcontrol_request_wait_duration_seconds``), where a request waits for a seat without
    using any CPU, and its calls to etcd by operation and type (``etcd_request_duration_seconds``). The
    busiest first."""
    sums: dict[str, dict[str, list[float]]] = {"duration": {}, "flow_control_wait": {}, "etcd": {}}
    for family in text_string_to_metric_families(cluster.kubectl("get", "--raw", "/metrics").stdout):
        labelled: tuple[str, ...]
        if family.name == "apiserver_request_duration_seconds":
            kind, labelled = "duration", ("verb", "resource")
        elif family.name == "apiserver_flowcontrol_request_wait_duration_seconds":
            kind, labelled = "flow_control_wait", ("priority_level",)
        elif family.name == "etcd_request_duration_seconds":
            kind, labelled = "etcd", ("operation", "type")
        else:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                key = " ".join(str(sample.labels.get(label)) for label in labelled)
                entry = sums[kind].setdefault(key, [0.0, 0.0])
                entry[sample.name.endswith("_count")] += sample.value
    return {
        kind: {
            f"{key} ({int(count)})": round(total / count, 4)
            for key, (total, count) in sorted(entries.items(), key=lambda item: -item[1][1])[:12]
            if count
        }
        for kind, entries in sums.items()
    }


def webhook_waits(cluster: ControlPlane) -> dict[str, float]:
    """Mean seconds the API server spent calling each admission webhook, by webhook, operation and type (its
    ``apiserver_admission_webhook_admission_duration_seconds``), with the number of calls: with Kueue, every Job
    the operator creates passes Kueue's mutating and validating webhooks before it is stored, inside the
    operator's create call."""
    sums: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(cluster.kubectl("get", "--raw", "/metrics").stdout):
        if family.name != "apiserver_admission_webhook_admission_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                labels = sample.labels
                key = f"{labels.get('name')} {labels.get('operation')} {labels.get('type')}"
                entry = sums.setdefault(key, [0.0, 0.0])
                entry[sample.name.endswith("_count")] += sample.value
    return {
        f"{key} ({int(count)})": round(total / count, 4)
        for key, (total, count) in sorted(sums.items(), key=lambda item: -item[1][1])
        if count
    }


def cpu_steal_ticks() -> int:
    """Ticks the hypervisor took from this machine's CPUs so far (``steal`` in /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8])


def stamped_figures(cluster: ControlPlane, namespace: str) -> dict[str, float]:
    """Apply -> Job and Job finished -> Succeeded again, from the objects' own timestamps (the API server's and
    the controllers' clocks, whole seconds), so that a watch of this script's that lags under load cannot
    inflate them: BatchBenchmark and Job creationTimestamp; the Job's completionTime and the lastTransitionTime
    of the benchmark's Complete condition (written by the operator when it saw the Job finished)."""

    def items(kind: str) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = json.loads(cluster.kubectl("get", kind, "-n", namespace, "-o", "json").stdout)[
            "items"
        ]
        return listed

    jobs = {job["metadata"]["name"]: job for job in items("jobs")}
    to_job: list[float] = []
    to_phase: list[float] = []
    for body in items("batchbenchmarks"):
        job = jobs.get(body["metadata"]["name"])
        if job is None:
            continue
        applied, created = stamp(body["metadata"]["creationTimestamp"]), stamp(job["metadata"]["creationTimestamp"])
        if applied is not None and created is not None:
            to_job.append(created - applied)
        conditions = (body.get("status") or {}).get("conditions") or []
        complete: dict[str, Any] = next(
            (c for c in conditions if c["type"] == "Complete" and c["status"] == "True"), {}
        )
        succeeded_at, finished_at = (
            stamp(complete.get("lastTransitionTime")),
            stamp(job["status"].get("completionTime")),
        )
        if succeeded_at is not None and finished_at is not None:
            to_phase.append(succeeded_at - finished_at)
    return {
        "stamped_apply_to_job_p50_s": statistics.median(to_job),
        "stamped_apply_to_job_p99_s": percentile(to_job, 0.99),
        "stamped_job_finished_to_succeeded_p50_s": statistics.median(to_phase),
        "stamped_job_finished_to_succeeded_p99_s": percentile(to_phase, 0.99),
    }


def log_lines(path: Path, marker: str) -> int:
    return sum(marker in line for line in path.read_text(errors="replace").splitlines())


def kueue_queue(cluster: ControlPlane, namespace: str) -> str:
    """The real Kueue on the cluster (stopped with it), with quota for every GPU of its nodes; the queue's name."""
    Kueue(cluster).start()
    gpus = cluster.gpus_per_node * len(cluster.gpu_node_names)
    kueue_api = CustomObjectsApi(cluster.api_client())
    for plural, body in (
        ("resourceflavors", resource_flavor("gpu")),
        ("clusterqueues", cluster_queue("gpus", "gpu", gpus)),
    ):
        kueue_api.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, body)
    kueue_api.create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", local_queue(namespace, "gpus", "gpus")
    )
    return "gpus"


def wait_healthy(port: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def latency_figures(recorder: Recorder, applied: dict[str, float]) -> dict[str, float]:
    """Median and p99 of each step, over the benchmarks that reached it, from what the watches saw."""
    steps = {
        "apply_to_job": [
            recorder.job_created[name] - applied[name] for name in applied if name in recorder.job_created
        ],
        "job_finished_to_succeeded": [
            recorder.succeeded[name] - recorder.job_finished[name]
            for name in recorder.succeeded
            if name in recorder.job_finished
        ],
        "apply_to_admitted": [
            recorder.job_admitted[name] - applied[name] for name in applied if name in recorder.job_admitted
        ],
        "apply_to_succeeded": [
            recorder.succeeded[name] - applied[name] for name in applied if name in recorder.succeeded
        ],
    }
    figures: dict[str, float] = {}
    for step, seconds in steps.items():
        figures[f"{step}_p50_s"] = round(statistics.median(seconds), 3)
        figures[f"{step}_p99_s"] = round(percentile(seconds, 0.99), 3)
    return figures


def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy recording the operator's raw stacks into ``output`` until it gets SIGINT."""
    return subprocess.Popen(
        [
            *(str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid)),
            *("--format", "raw", "--nonblocking", "--rate", "50", "--output", str(output)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_operator(cluster: ControlPlane, log: IO[bytes]) -> tuple[subprocess.Popen[bytes], int]:
    """`batchmark operator` as a process of this machine against the cluster, once healthy; and its metrics port."""
    metrics_port, health_port = free_port(), free_port()
    operator = subprocess.Popen(
        [
            *(sys.executable, "-m", "batchmark.runner.cli", "operator", "--metrics-address", "127.0.0.1"),
            *("--metrics-port", str(metrics_port), "--health-address", "127.0.0.1"),
            *("--health-port", str(health_port)),
        ],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(health_port)
    except BaseException:
        stop(operator)
        raise
    return operator, metrics_port


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", type=int, default=200)
    parser.add_argument("--requests", type=int, default=40, help="requests per benchmark")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--kueue", action="store_true", help="queue them through the real Kueue (16 GPUs of quota)")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="write py-spy's raw stacks of the operator here")
    args = parser.parse_args()
    # Built before the cluster starts: seconds while the tree is unchanged, minutes the first time.
    runner_archive = images.built_archive("runner")
    with (
        tempfile.TemporaryDirectory(prefix="batchmark-scale-") as directory,
        ControlPlane(Path(directory), audit_policy=AUDIT_POLICY) as cluster,
    ):
        # The benchmarks name no image: the operator's default, one of the names the image is put under.
        cluster.load_images([runner_archive], {images.TAGS["runner"]: images.default_names("runner")})
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml"))
        cluster.wait("--for=condition=Established", "crd/batchbenchmarks.batchmark.dev")
        namespace = "scale"
        cluster.kubectl("create", "namespace", namespace)
        queue = kueue_queue(cluster, namespace) if args.kueue else None
        log = (Path(directory) / "operator.log").open("wb")
        operator, metrics_port = start_operator(cluster, log)
        try:
            recorder = Recorder(cluster, namespace)
            time.sleep(2)
            profiler = start_profiler(operator.pid, args.profile) if args.profile is not None else None
            load_before = os.getloadavg()
            cpu_before = cpu_seconds(operator.pid)
            steal_before = cpu_steal_ticks()
            api = CustomObjectsApi(cluster.api_client())
            applied: dict[str, float] = {}
            started = time.monotonic()
            memory = MemorySampler(operator.pid, recorder, applied, started)
            for index in range(args.benchmarks):
                name = f"bb-{index:03d}"
                api.create_namespaced_custom_object(
                    "batchmark.dev", "v1alpha1", namespace, "batchbenchmarks", manifest(name, args.requests, queue)
                )
                applied[name] = time.monotonic()
            while recorder.ended() < args.benchmarks and time.monotonic() - started < args.timeout:
                time.sleep(0.5)
            drained = max(recorder.succeeded.values(), default=time.monotonic()) - started
            operator_cpu = cpu_seconds(operator.pid) - cpu_before
            steal_seconds = (cpu_steal_ticks() - steal_before) / os.sysconf("SC_CLK_TCK")
            reconciles, reconcile_mean = reconcile_figures(metrics_port)
            memory_figures = memory.figures()
            load_after = os.getloadavg()
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(timeout=60)
            recorder.stop.set()
            figures = {
                "kueue": args.kueue,
                "benchmarks": args.benchmarks,
                "succeeded": len(recorder.succeeded),
                "failed": recorder.failed,
                "max_running_at_once": recorder.max_running,
                **latency_figures(recorder, applied),
                "drain_all_s": round(drained, 1),
                "operator_peak_rss_mb": round(peak_rss_mb(operator.pid), 1),
                "operator_cpu_s": round(operator_cpu, 1),
                "operator_cpu_s_per_benchmark": round(operator_cpu / args.benchmarks, 3),
                "operator_reconciles": reconciles,
                "operator_reconcile_mean_s": round(reconcile_mean, 3),
                "load_average_1m_before_after": [round(load_before[0], 1), round(load_after[0], 1)],
                **stamped_figures(cluster, namespace),
                **audited_figures(cluster, namespace),
                **memory_figures,
                # Since the control plane started (the operator's start-up and the 200 applies included).
                "api_requests_top": dict(list(api_requests(cluster).items())[:25]),
                "api_mean_seconds": api_waits(cluster),
                "admission_webhook_mean_seconds": webhook_waits(cluster),
                # CPU seconds the hypervisor gave to others while this run wanted them (of 2 × drain available).
                "cpu_steal_s": round(steal_seconds, 1),
                # The operator's own complaints (failed API calls, handler errors): a refresh lost to one leaves
                # a status stale.
                "operator_log_warnings": log_lines(Path(directory) / "operator.log", " WARNING "),
                "operator_log_errors": log_lines(Path(directory) / "operator.log", " ERROR "),
            }
            print(json.dumps(figures, indent=2))
        finally:
            stop(operator)
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
