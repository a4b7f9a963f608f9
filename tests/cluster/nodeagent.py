"""A kubelet stand-in for fake nodes: it runs each pod bound to them as local processes.

It watches the pods bound to its nodes and, for each one, as a kubelet would:

- materialises the pod's ConfigMap, Secret, projected (service-account token, ConfigMap, Secret, downward
  API), downward-API and emptyDir volumes as files under a folder of the pod's own, and uses hostPath
  volumes as they are;
- makes sure each container's image is on the node before it starts, under the container's
  `imagePullPolicy`: the nodes hold a fixed set of images (the project's own, PROJECT_IMAGES, plus those
  given with --image) and no registry is reachable from them, so any other image fails to pull as it would
  on a kubelet (waiting ErrImagePull, then ImagePullBackOff with back-off and retries, or ErrImageNeverPull,
  InvalidImageName; with the kubelet's events); a present image is never really pulled or unpacked;
- builds each container's environment (`env` with `value` and `valueFrom` for ConfigMaps, Secrets and pod
  fields, `envFrom`), expands `$(VAR)` references in command and args, and starts the command in its
  working directory: the command runs with this machine's programs, the agent's own Python environment
  first on PATH (so `batchmark` is this checkout's), whatever the image;
- enforces each container's memory limit as a memory cgroup's OOM killer appears to a kubelet: over its
  `resources.limits.memory`, the container's process tree is killed and it ends OOMKilled, exit code 137;
- gives each container the CPU weight a kubelet's cgroups would, from its CPU request, as a niceness
  (cpu_niceness) of its processes and of its session's autogroup where the kernel has them: a pod without
  requests yields the CPU to the control plane, as on a real node, where the kubelet and the system's daemons
  keep their share and the control plane runs elsewhere;
- runs init containers one after another, then the containers, restarting them as `restartPolicy` says;
- reports the pod's status (Pending, Running, Succeeded or Failed, conditions, container states with exit
  code, reason and termination message) and events;
- on deletion sends SIGTERM, then SIGKILL after the grace period, then removes the pod as a kubelet does;
- enforces the pod's `activeDeadlineSeconds` (the Job controller's deadline works by deleting pods).

Absolute paths: a container sees its volumes at their mount paths, which a process on this machine cannot
without a container runtime. So every mount path (and the termination message path) is mapped to a folder
of the pod's, and each argument and environment value that is such a path, or starts with one (also as the
value of `--flag=/path`), is rewritten to the mapped path. A program that builds such paths itself,
without getting them from its arguments or environment, does not see its files.

Service-account credentials: when the pod has a service-account token volume (the `kube-api-access-*` one
that admission adds), the agent requests a token bound to the pod with the TokenRequest API, writes it
where the volume is mapped, and also writes a kubeconfig using it, named by `KUBECONFIG`. The agent does not
set KUBERNETES_SERVICE_HOST, so clients that try in-cluster configuration first fall back to KUBECONFIG.

It also serves the kubelet's containerLogs endpoint, so `kubectl logs [-f]` works.

Readiness probes (httpGet and tcpSocket, on 127.0.0.1) decide when a running container is ready, with the
probe's delay, period, timeout and thresholds, so `helm install --wait` and rollouts wait as they would on a
kubelet. Not supported: images' entrypoints (a container without `command` runs --default-entrypoint),
liveness, startup and exec probes (a container with only those counts as ready once running), CPU limits
(requests set a weight, see cpu_niceness; memory limits are enforced, see MemoryLimits), network isolation
(every pod's IP is 127.0.0.1 and its ports are this machine's), `kubectl exec`, `attach` and `port-forward`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import http.server
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JsonObject = dict[str, Any]

# Environment variables handed on from the agent to every container, so programs find their caches and
# configuration as they do outside a pod.
PASSED_ON_VARIABLES = (
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "XDG_CACHE_HOME",
    "COVERAGE_PROCESS_START",
)
# ... and those whose names start so: settings of the engines and libraries a benchmark pod uses.
PASSED_ON_PREFIXES = ("HF_", "VLLM_", "CUDA_", "OMP_", "TORCH")
CPU_SHARES_MIN = 2  # a kubelet's cpu.shares for a container without a CPU request
NICENESS_MAX = 19
AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"
# The largest termination message a kubelet keeps, and the fallback from logs' limits.
TERMINATION_MESSAGE_LIMIT = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
HEARTBEAT_SECONDS = 30
# A kubelet backs off restarting crashing containers for 10 s up to 5 min; tests want it quicker.
RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0)
# The images on every fake node. The agent runs this checkout's programs whatever the image says, so the node
# holds the project's own images under every tag (`:*`): the runner (the chart's benchmarkDefaults and the
# operator's default image) and the operator (the chart's Deployment). Any other image would have to be pulled,
# and no registry is reachable from these nodes. A test checks that this covers the chart's values and the
# operator's default.
PROJECT_IMAGES = (
    "batchmark-runner:*",
    "batchmark-operator:*",
    "ghcr.io/batchmark/batchmark-runner:*",
    "ghcr.io/batchmark/batchmark-operator:*",
)
# A kubelet backs off pulling an image for 10 s, doubling up to 5 min; here five times quicker.
IMAGE_PULL_BACKOFF_SECONDS = (2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
# How long a failed pull shows as ErrImagePull before the back-off does (a kubelet's next sync of the pod).
IMAGE_PULL_SYNC_SECONDS = 1.0
# How often the processes of containers with a memory limit are measured.
MEMORY_POLL_SECONDS = 0.25


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


class KubeApi:
    """A small client of the Kubernetes REST API, configured from a kubeconfig file."""

    def __init__(self, kubeconfig_path: Path, credentials_directory: Path) -> None:
        text = kubeconfig_path.read_text()
        try:
            config: JsonObject = json.loads(text)
        except json.JSONDecodeError:
            import yaml  # only kubeconfigs not written by the control plane are YAML

            config = yaml.safe_load(text)
        context_name = config["current-context"]
        context = next(item["context"] for item in config["contexts"] if item["name"] == context_name)
        cluster = next(item["cluster"] for item in config["clusters"] if item["name"] == context["cluster"])
        user = next(item["user"] for item in config["users"] if item["name"] == context["user"])
        self.server: str = cluster["server"].rstrip("/")
        self.ca_pem: bytes = base64.b64decode(cluster["certificate-authority-data"])
        self._token: str | None = user.get("token")
        credentials_directory.mkdir(parents=True, exist_ok=True)
        self._context = ssl.create_default_context(cadata=self.ca_pem.decode())
        if "client-certificate-data" in user:
            # The ssl module reads client certificates only from files.
            certificate = credentials_directory / "client.crt"
            key = credentials_directory / "client.key"
            certificate.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.touch(mode=0o600)
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            self._context.load_cert_chain(str(certificate), str(key))

    def _open(self, method: str, path: str, body: Any, content_type: str, timeout: float) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self._token is not None:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            return urllib.request.urlopen(request, context=self._context, timeout=timeout)
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, error.read().decode(errors="replace")) from None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> JsonObject:
        with self._open(method, path, body, content_type, timeout) as answer:
            decoded: JsonObject = json.loads(answer.read())
            return decoded

    def get(self, path: str) -> JsonObject:
        return self.call("GET", path)

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> Iterator[JsonObject]:
        """The watch events of a collection, until the server ends the watch after timeout_seconds."""
        separator = "&" if "?" in path else "?"
        query = urllib.parse.urlencode(
            {
                "watch": "1",
                "resourceVersion": resource_version,
                "timeoutSeconds": str(timeout_seconds),
                "allowWatchBookmarks": "true",
            }
        )
        with self._open("GET", f"{path}{separator}{query}", None, "", timeout_seconds + 30) as stream:
            for line in stream:
                if line.strip():
                    event: JsonObject = json.loads(line)
                    yield event


@dataclass
class PathMap:
    """Where each absolute path a container expects lies on this machine."""

    mounts: list[tuple[str, Path]] = field(default_factory=list)

    def add(self, container_path: str, local_path: Path) -> None:
        self.mounts.append((container_path.rstrip("/") or "/", local_path))
        # The longest (most specific) mount path must win.
        self.mounts.sort(key=lambda mount: len(mount[0]), reverse=True)

    def local(self, container_path: str) -> str | None:
        for mount_path, local_path in self.mounts:
            if container_path == mount_path:
                return str(local_path)
            if container_path.startswith(mount_path + "/"):
                return str(local_path / container_path[len(mount_path) + 1 :])
        return None

    def rewrite(self, value: str) -> str:
        """The value with a leading mounted path replaced, also after `--flag=`."""
        mapped = self.local(value)
        if mapped is not None:
            return mapped
        name, equals, rest = value.partition("=")
        if equals and rest.startswith("/"):
            mapped = self.local(rest)
            if mapped is not None:
                return f"{name}={mapped}"
        return value


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand_references(value: str, environment: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known variables are replaced, $$ escapes, unknown ones stay as is."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return environment.get(name, match.group(0))

    return _REFERENCE.sub(replace, value)


# Image references, as a container runtime parses and normalises them (the distribution/reference grammar).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}|\*))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)


@dataclass(frozen=True)
class ImageReference:
    """An image reference, normalised: `busybox` is `docker.io/library/busybox:latest`."""

    repository: str  # registry domain and path
    tag: str | None  # None only with a digest; `*` (in the node's list only) stands for every tag
    digest: str | None = None

    @classmethod
    def parse(cls, reference: str, wildcard: bool = False) -> ImageReference:
        """Parse as a kubelet does (ValueError: invalid reference format); wildcard allows the tag `*`."""
        match = _IMAGE_REFERENCE.fullmatch(reference)
        if match is None or len(match.group("name")) > 255 or (match.group("tag") == "*" and not wildcard):
            raise ValueError("invalid reference format")
        name = match.group("name")
        first, slash, rest = name.partition("/")
        # Docker's rule: the first component is a registry when it looks like a host; else it is Docker Hub.
        if slash and (any(mark in first for mark in ".:") or first == "localhost" or first != first.lower()):
            domain, path = first, rest
        else:
            domain, path = "docker.io", name
        if domain == "index.docker.io":
            domain = "docker.io"
        if domain == "docker.io" and "/" not in path:
            path = f"library/{path}"
        tag, digest = match.group("tag"), match.group("digest")
        if tag is None and digest is None:
            tag = "latest"
        return cls(f"{domain}/{path}", tag, digest)

    @property
    def registry(self) -> str:
        domain = self.repository.split("/", 1)[0]
        return "registry-1.docker.io" if domain == "docker.io" else domain

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


class ImageStore:
    """The images present on the fake nodes. Nothing else can be pulled: no registry is reachable from them."""

    def __init__(self, references: Iterable[str]) -> None:
        self.references = list(references)
        self.images = [ImageReference.parse(reference, wildcard=True) for reference in self.references]

    def has(self, image: ImageReference) -> bool:
        for present in self.images:
            if present.repository != image.repository:
                continue
            if present.tag == "*" or (image.digest is not None and present.digest == image.digest):
                return True
            if image.digest is None and present.tag == image.tag:
                return True
        return False

    def pull_error(self, image: ImageReference, node: str) -> str:
        """What the container runtime answers a pull with: it cannot reach the image's registry."""
        version = image.digest or image.tag
        path = image.repository.split("/", 1)[1]
        return (
            f'rpc error: code = Unavailable desc = failed to pull and unpack image "{image}": '
            f'failed to resolve reference "{image}": failed to do request: '
            f'Head "https://{image.registry}/v2/{path}/manifests/{version}": '
            f"no registry is reachable from the fake node {node}; it has only {', '.join(self.references)}"
        )


def default_pull_policy(image: ImageReference) -> str:
    """The API server's default: Always for `:latest` (or no tag), else IfNotPresent."""
    return "Always" if image.tag == "latest" and image.digest is None else "IfNotPresent"


_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")
_QUANTITY_SUFFIXES: dict[str, float] = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    **{suffix: float(2 ** (10 * power)) for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
}


def quantity_value(quantity: str | int | float) -> float:
    """A Kubernetes quantity (`64Mi`, `1G`, `128974848`, `129e6`, `500m`) as a number."""
    match = _QUANTITY.fullmatch(str(quantity).strip())
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    number, suffix = float(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * 10.0 ** int(suffix[1:])
    return number * _QUANTITY_SUFFIXES.get(suffix, 1)


def cpu_niceness(container: JsonObject) -> int:
    """The niceness that stands in for the CPU weight a kubelet gives the container's cgroup.

    A kubelet sets `cpu.shares` to the container's CPU request in millicores × 1024 / 1000, and to 2, the
    least there is, without a request (every container of a BestEffort pod): the control plane and the node's
    own daemons, outside those cgroups, win the CPU whenever they want it. Without cgroups, the same weight
    comes from the scheduler's niceness table (each step is a factor of about 1.25 in weight, 0 = 1024):
    no request is niceness 19, 500m is 3, one core or more is 0 (never above the agent's own).
    """
    request = container.get("resources", {}).get("requests", {}).get("cpu")
    shares = CPU_SHARES_MIN if request is None else max(CPU_SHARES_MIN, quantity_value(request) * 1024)
    if shares >= 1024:
        return 0
    return min(NICENESS_MAX, round(math.log(1024 / shares, 1.25)))


def autogroups_on() -> bool:
    """Whether the kernel shares the CPU between sessions before it weighs niceness (sched_autogroup)."""
    try:
        return Path(AUTOGROUP_SWITCH).read_text().strip() == "1"
    except OSError:
        return False


def set_autogroup_niceness(pid: int, niceness: int) -> None:
    """Set the niceness of the autogroup (the session's scheduling group) the process is in, where the
    kernel has autogroups on; without them niceness alone weighs against every other process."""
    if not autogroups_on():
        return
    autogroup = Path(f"/proc/{pid}/autogroup")
    for _ in range(10):
        try:
            autogroup.write_text(f"{niceness}\n")
            return
        except FileNotFoundError as error:
            raise ProcessLookupError(pid) from error
        except BlockingIOError:  # without CAP_SYS_ADMIN the kernel takes one change per group per 100 ms
            time.sleep(0.1)
    autogroup.write_text(f"{niceness}\n")


def memory_limit(container: JsonObject) -> int | None:
    """The container's memory limit in bytes, if it has one."""
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    return None if limit is None else math.ceil(quantity_value(limit))


class MemoryLimits:
    """Kills a container's processes once they use more memory than its limit, as a memory cgroup does.

    Without a container runtime there is no cgroup to charge, and creating one needs privileges a CI runner
    may lack; so one thread measures every limited container a few times a second: its process tree (the
    descendants of its first process, and any process left in its session) and their proportional set size
    (PSS: a page shared within the tree, e.g. with a forked worker, counts once, as a cgroup charges it once).
    Over the limit, the whole tree gets SIGKILL, as the kernel's OOM killer does to a container whose cgroup
    kills as a group (`memory.oom.group`, which kubelets on cgroup v2 set). The kernel stops a process at the
    very page that passes the limit; this notices it within one poll, so a fast allocator overshoots a little.
    """

    def __init__(self, log: Callable[[str], None], period_seconds: float = MEMORY_POLL_SECONDS) -> None:
        self.log = log
        self.period_seconds = period_seconds
        self.condition = threading.Condition()
        # First process -> (limit in bytes, what to call before its tree is killed).
        self.watched: dict[int, tuple[int, Callable[[int], None]]] = {}
        threading.Thread(target=self._run, name="memory limits", daemon=True).start()

    def watch(self, pid: int, limit: int, on_kill: Callable[[int], None]) -> None:
        with self.condition:
            self.watched[pid] = (limit, on_kill)
            self.condition.notify()

    def forget(self, pid: int) -> None:
        with self.condition:
            self.watched.pop(pid, None)

    def _run(self) -> None:
        while True:
            with self.condition:
                while not self.watched:
                    self.condition.wait()
                watched = dict(self.watched)
            try:
                self._check(watched)
            except Exception:  # a measurement that fails must not end enforcement for everyone
                self.log(f"memory limits: check failed\n{traceback.format_exc()}")
            time.sleep(self.period_seconds)

    def _check(self, watched: Mapping[int, tuple[int, Callable[[int], None]]]) -> None:
        children: dict[int, list[int]] = {}
        sessions: dict[int, list[int]] = {}
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] in ("Z", "X"):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            sessions.setdefault(int(fields[3]), []).append(int(entry.name))
        for root, (limit, on_kill) in watched.items():
            # Each container's first process leads a session of its own (the agent starts it so).
            members = {root, *sessions.get(root, [])}
            frontier = list(members)
            while frontier:
                for child in children.get(frontier.pop(), []):
                    if child not in members:
                        members.add(child)
                        frontier.append(child)
            usage = sum(process_memory(pid) for pid in members)
            if usage <= limit:
                continue
            with self.condition:
                current = self.watched.get(root)
                if current is None or current[1] is not on_kill:
                    continue  # its process ended meanwhile
                del self.watched[root]
            on_kill(usage)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(root, signal.SIGKILL)
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def process_memory(pid: int) -> int:
    """The process' proportional set size in bytes (its resident set where the kernel lacks smaps_rollup)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
        return 0
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    try:
        resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def readiness_probe(container: JsonObject) -> JsonObject | None:
    """The container's readiness probe, if it has one the agent can run."""
    probe: JsonObject | None = container.get("readinessProbe")
    if probe is None or ("httpGet" not in probe and "tcpSocket" not in probe):
        return None
    return probe


class ReadinessTracker:
    """Runs a container's readiness probe on its schedule and applies its thresholds, as a kubelet does."""

    def __init__(self, container: JsonObject) -> None:
        self.container = container
        self.spec = readiness_probe(container)
        probe = self.spec or {}
        self.period = float(probe.get("periodSeconds", 10))
        self.timeout = float(probe.get("timeoutSeconds", 1))
        self.success_threshold = int(probe.get("successThreshold", 1))
        self.failure_threshold = int(probe.get("failureThreshold", 3))
        self.next_time = time.monotonic() + float(probe.get("initialDelaySeconds", 0))
        self.ready = False
        self.successes = 0
        self.failures = 0

    def due(self) -> bool:
        return self.spec is not None and time.monotonic() >= self.next_time

    def probe(self) -> bool:
        """Probe once; whether the container is ready now."""
        self.next_time = time.monotonic() + self.period
        if self._passes():
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.success_threshold:
                self.ready = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            # Until the first success the container is not ready; after it, only failureThreshold failures
            # in a row take readiness away.
            if self.failures >= self.failure_threshold:
                self.ready = False
        return self.ready

    def _port(self, port: int | str) -> int:
        if isinstance(port, int) or port.isdigit():
            return int(port)
        for declared in self.container.get("ports", []):
            if declared.get("name") == port:
                return int(declared["containerPort"])
        raise ValueError(f"no container port named {port}")

    def _passes(self) -> bool:
        assert self.spec is not None
        try:
            if "tcpSocket" in self.spec:
                with socket.create_connection(("127.0.0.1", self._port(self.spec["tcpSocket"]["port"])), self.timeout):
                    return True
            get = self.spec["httpGet"]
            scheme = str(get.get("scheme", "HTTP")).lower()
            url = f"{scheme}://127.0.0.1:{self._port(get['port'])}{get.get('path', '/')}"
            headers = {header["name"]: header["value"] for header in get.get("httpHeaders", [])}
            context = ssl._create_unverified_context() if scheme == "https" else None  # a kubelet skips verification
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=self.timeout, context=context
            ) as answer:
                return 200 <= int(answer.status) < 400
        except (OSError, ValueError, urllib.error.URLError):
            return False


class PodConfigError(Exception):
    """A ConfigMap, Secret or key the pod needs does not exist yet; the kubelet keeps retrying."""


@dataclass
class ContainerRun:
    """The state of one container, as the pod status reports it."""

    name: str
    spec: JsonObject
    init: bool
    restart_count: int = 0
    state: JsonObject = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JsonObject = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    # Each container sees the pod's volumes at its own mount paths, and has a termination message file
    # of its own at the same path as its siblings'.
    paths: PathMap = field(default_factory=PathMap)
    termination_message_file: Path | None = None
    # What the readiness probe last concluded; a container without one is ready while it runs.
    probed_ready: bool = False

    @property
    def ready(self) -> bool:
        return "running" in self.state and (self.probed_ready or readiness_probe(self.spec) is None)

    def status(self, image_id: str) -> JsonObject:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": image_id,
            "containerID": f"batchmark-nodeagent://{self.process.pid}" if self.process else "",
            "restartCount": self.restart_count,
            "ready": self.ready,
            "started": running,
            "state": self.state,
            "lastState": self.last_state,
        }


class PodWorker:
    """Runs one pod to its end, or until it is deleted."""

    def __init__(self, agent: NodeAgent, pod: JsonObject) -> None:
        self.agent = agent
        self.pod = pod
        metadata = pod["metadata"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.uid: str = metadata["uid"]
        self.directory = agent.work_directory / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.root = self.directory / "root"
        self.lock = threading.Lock()
        self.publish_lock = threading.Lock()
        self.stop_requested = threading.Event()
        self.stop_grace_seconds = float("inf")
        self.stop_reason: tuple[str, str] | None = None
        self.pod_gone = False
        self.start_time: str | None = pod.get("status", {}).get("startTime")
        self.phase = "Pending"
        self.pod_reason: tuple[str, str] | None = None
        # Condition type -> (status, when it last changed), so transition times are those of real changes.
        self.condition_transitions: dict[str, tuple[str, str]] = {}
        self.initialized = not pod["spec"].get("initContainers")
        spec = pod["spec"]
        self.init_containers = [ContainerRun(c["name"], c, init=True) for c in spec.get("initContainers", [])]
        self.containers = [ContainerRun(c["name"], c, init=False) for c in spec.get("containers", [])]
        self.thread = threading.Thread(target=self._run, name=f"pod {self.namespace}/{self.name}", daemon=True)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def start(self) -> None:
        self.thread.start()

    def request_stop(self, grace_seconds: float, reason: tuple[str, str] | None = None, gone: bool = False) -> None:
        """Stop the pod's processes: SIGTERM now, SIGKILL after grace_seconds."""
        with self.lock:
            self.stop_grace_seconds = min(self.stop_grace_seconds, grace_seconds)
            if reason is not None and self.stop_reason is None:
                self.stop_reason = reason
            self.pod_gone = self.pod_gone or gone
        self.stop_requested.set()

    # The pod's life.

    def _run(self) -> None:
        try:
            self._live()
        except Exception:
            self.agent.log(f"pod {self.namespace}/{self.name}: agent error\n{traceback.format_exc()}")
            self._kill_all(0)
            self.phase = "Failed"
            self.pod_reason = ("NodeAgentError", "the node agent failed to run this pod; see its log")
            self._publish()
        finally:
            self.agent.worker_finished(self)

    def _live(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.start_time is None:
            self.start_time = now_rfc3339()
        self._publish()
        while not self._prepare():
            if self.stop_requested.wait(2):
                self._finish_deleted()
                return
        restart_policy: str = self.pod["spec"].get("restartPolicy", "Always")
        for container in self.init_containers:
            while True:
                exit_code = self._run_to_end(container)
                if exit_code is None:
                    self._finish_deleted()
                    return
                if exit_code == 0:
                    break
                if restart_policy == "Never":
                    self.phase = "Failed"
                    self._finish()
                    return
                container.restart_count += 1
                if self._back_off(container):
                    self._finish_deleted()
                    return
        self.initialized = True
        threads = [
            threading.Thread(target=self._keep_running, args=(c, restart_policy), daemon=True) for c in self.containers
        ]
        for thread in threads:
            thread.start()
        self.phase = "Running"
        while any(thread.is_alive() for thread in threads):
            self._enforce_deadline()
            for thread in threads:
                thread.join(timeout=0.2)
        if self.stop_requested.is_set():
            self._finish_deleted()
            return
        exit_codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in self.containers]
        self.phase = "Succeeded" if all(code == 0 for code in exit_codes) else "Failed"
        self._finish()

    def _enforce_deadline(self) -> None:
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        if deadline is None or self.start_time is None or self.stop_requested.is_set():
            return
        if time.time() - parse_rfc3339(self.start_time) > deadline:
            self.agent.log(f"pod {self.namespace}/{self.name}: active deadline of {deadline} s exceeded")
            message = "Pod was active on the node longer than the specified deadline"
            self.request_stop(self._grace_from_spec(), reason=("DeadlineExceeded", message))

    def _grace_from_spec(self) -> float:
        grace: float = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return grace

    def _keep_running(self, container: ContainerRun, restart_policy: str) -> None:
        while True:
            exit_code = self._run_to_end(container)
            if exit_code is None:
                return
            if restart_policy == "Never" or (restart_policy == "OnFailure" and exit_code == 0):
                return
            container.restart_count += 1
            if self._back_off(container):
                return

    def _back_off(self, container: ContainerRun) -> bool:
        """Wait before a restart, as CrashLoopBackOff; True when the pod is being stopped meanwhile."""
        delay = RESTART_BACKOFF_SECONDS[min(container.restart_count - 1, len(RESTART_BACKOFF_SECONDS) - 1)]
        with self.lock:
            container.last_state = {"terminated": container.state.get("terminated", {})}
            container.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={container.name} pod={self.name}",
                }
            }
        self._publish()
        return self.stop_requested.wait(delay)

    def _set_cpu_weight(self, container: ContainerRun, pid: int) -> None:
        """Give the container's processes its CPU weight, also against the processes of other sessions.

        With the kernel's autogroups on, the scheduler first shares the CPU fairly between sessions and only
        then by niceness within one; the container runs in a session of its own, so its niceness alone would
        leave it a whole session's share beside the control plane's. Its session's autogroup gets the same
        niceness, which is what a kubelet's per-pod cgroup with its cpu.shares is.
        """
        niceness = cpu_niceness(container.spec)
        try:
            os.setpriority(os.PRIO_PROCESS, pid, niceness)  # the children it forks inherit it
            set_autogroup_niceness(pid, niceness)
        except ProcessLookupError:
            return
        except OSError as error:
            self.agent.log(f"pod {self.namespace}/{self.name}: container {container.name}: no CPU weight: {error}")

    def _run_to_end(self, container: ContainerRun) -> int | None:
        """Run the container's process once; its exit code, or None when the pod is being stopped."""
        if self.stop_requested.is_set() or not self._ensure_image(container):
            return None
        try:
            argv, environment, working_directory = self._command(container)
            log_path = self.directory / f"{container.name}.log"
            with log_path.open("ab") as log:
                process = subprocess.Popen(
                    argv,
                    env=environment,
                    cwd=working_directory,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except (OSError, PodConfigError) as error:
            now = now_rfc3339()
            with self.lock:
                container.state = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": str(error),
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
            self.agent.event(
                self.pod, "Warning", "Failed", f"Error: failed to start container {container.name}: {error}"
            )
            self._publish()
            return 128
        self._set_cpu_weight(container, process.pid)
        self.agent.record_process(self, container, process)
        started_at = now_rfc3339()
        with self.lock:
            container.process = process
            container.state = {"running": {"startedAt": started_at}}
            if not container.init:
                self.phase = "Running"
        self.agent.event(self.pod, "Normal", "Started", f"Started container {container.name}")
        self._publish()
        out_of_memory = threading.Event()
        limit = memory_limit(container.spec)
        if limit is not None:

            def on_kill(usage: int) -> None:
                out_of_memory.set()
                self.agent.log(
                    f"pod {self.namespace}/{self.name}: container {container.name} used {usage / 2**20:.0f} MiB, "
                    f"over its limit of {limit / 2**20:.0f} MiB: killed (OOMKilled)"
                )

            self.agent.memory_limits.watch(process.pid, limit, on_kill)
        killed = False
        readiness = ReadinessTracker(container.spec) if not container.init else None
        while process.poll() is None:
            if self.stop_requested.wait(0.1):
                self._kill(process)
                killed = True
                break
            if readiness is not None and readiness.due():
                ready = readiness.probe()
                if ready != container.probed_ready:
                    with self.lock:
                        container.probed_ready = ready
                    self._publish()
        exit_code = process.wait()
        self.agent.memory_limits.forget(process.pid)
        self.agent.forget_process(self, container)
        if exit_code < 0:
            # The shell convention a container runtime reports for a signal: 128 + its number.
            exit_code = 128 - exit_code
        reason = "OOMKilled" if out_of_memory.is_set() else "Completed" if exit_code == 0 else "Error"
        terminated: JsonObject = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started_at,
            "finishedAt": now_rfc3339(),
        }
        message = self._termination_message(container, exit_code)
        if message:
            terminated["message"] = message
        with self.lock:
            container.state = {"terminated": terminated}
            container.probed_ready = False
        if not self.stop_requested.is_set():
            self._publish()
        return None if killed else exit_code

    def _ensure_image(self, container: ContainerRun) -> bool:
        """Make sure the container's image is on the node, as a kubelet does before it starts a container.

        True: it is (or was pulled). False: the pod is being stopped while the image cannot be had; until
        then the container waits with the kubelet's reason (ErrImagePull, ImagePullBackOff, ErrImageNeverPull,
        InvalidImageName) and message, and failed pulls are retried with back-off, with the kubelet's events.
        """
        image = str(container.spec.get("image", ""))
        try:
            reference = ImageReference.parse(image)
        except ValueError as error:
            quoted = f'"{image}"'
            message = f"Failed to apply default image tag {quoted}: couldn't parse image reference {quoted}: {error}"
            self.agent.event(self.pod, "Warning", "InspectFailed", message)
            self._wait_as(container, "InvalidImageName", message)
            return self._wait_for_stop()
        present = self.agent.images.has(reference)
        policy = container.spec.get("imagePullPolicy") or default_pull_policy(reference)
        if policy == "Never" or (policy == "IfNotPresent" and present):
            if present:
                self.agent.event(self.pod, "Normal", "Pulled", f'Container image "{image}" already present on machine')
                return True
            message = f'Container image "{image}" is not present with pull policy of Never'
            self.agent.event(self.pod, "Warning", "ErrImageNeverPull", message)
            self.agent.event(self.pod, "Warning", "Failed", "Error: ErrImageNeverPull")
            self._wait_as(container, "ErrImageNeverPull", message)
            return self._wait_for_stop()
        attempt = 0
        while True:
            self.agent.event(self.pod, "Normal", "Pulling", f'Pulling image "{image}"')
            if present:
                # What the node holds, its registry has too: a pull under policy Always finds the same image.
                message = f'Successfully pulled image "{image}" in 0s (0s including waiting). Image size: 0 bytes.'
                self.agent.event(self.pod, "Normal", "Pulled", message)
                return True
            delay = IMAGE_PULL_BACKOFF_SECONDS[min(attempt, len(IMAGE_PULL_BACKOFF_SECONDS) - 1)]
            backed_off_until = time.monotonic() + delay
            attempt += 1
            failure = self.agent.images.pull_error(reference, str(self.pod["spec"].get("nodeName", "")))
            self.agent.event(self.pod, "Warning", "Failed", f'Failed to pull image "{image}": {failure}')
            self.agent.event(self.pod, "Warning", "Failed", "Error: ErrImagePull")
            self._wait_as(container, "ErrImagePull", failure)
            if self.stop_requested.wait(IMAGE_PULL_SYNC_SECONDS):
                return False
            self.agent.event(self.pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
            self.agent.event(self.pod, "Warning", "Failed", "Error: ImagePullBackOff")
            self._wait_as(container, "ImagePullBackOff", f'Back-off pulling image "{image}": ErrImagePull: {failure}')
            if self.stop_requested.wait(max(0.0, backed_off_until - time.monotonic())):
                return False

    def _wait_as(self, container: ContainerRun, reason: str, message: str) -> None:
        with self.lock:
            container.state = {"waiting": {"reason": reason, "message": message}}
        self._publish()

    def _wait_for_stop(self) -> bool:
        """Wait, as a container that cannot start does, until the pod is stopped; always False."""
        self.stop_requested.wait()
        return False

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        with self.lock:
            grace = self.stop_grace_seconds
        self._signal(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._signal(process, signal.SIGKILL)
            process.wait()

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signal_number: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal_number)

    def _kill_all(self, grace_seconds: float) -> None:
        self.request_stop(grace_seconds)
        for container in self.init_containers + self.containers:
            process = container.process
            if process is not None and process.poll() is None:
                self._kill(process)

    def _termination_message(self, container: ContainerRun, exit_code: int) -> str:
        spec = container.spec
        path = container.termination_message_file
        message = ""
        if path is not None:
            try:
                with path.open("rb") as file:
                    message = file.read(TERMINATION_MESSAGE_LIMIT).decode(errors="replace")
            except FileNotFoundError:
                pass
        if not message and exit_code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            log = (self.directory / f"{container.name}.log").read_bytes()
            tail = b"\n".join(log.splitlines()[-FALLBACK_LOG_LINES:])[-FALLBACK_LOG_BYTES:]
            message = tail.decode(errors="replace")
        return message

    def _finish(self) -> None:
        self._publish()
        self.agent.log(f"pod {self.namespace}/{self.name}: {self.phase}")
        if self.pod.get("metadata", {}).get("deletionTimestamp"):
            self._delete_from_api()

    def _finish_deleted(self) -> None:
        """After a stop: report the final state (unless the pod is gone), then confirm the deletion."""
        with self.lock:
            reason = self.stop_reason
            gone = self.pod_gone
        if gone:
            return
        for container in self.init_containers + self.containers:
            if "terminated" not in container.state:
                container.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "finishedAt": now_rfc3339(),
                    }
                }
        if reason is not None:
            self.phase = "Failed"
            self.pod_reason = reason
            self.agent.event(self.pod, "Warning", reason[0], reason[1])
        else:
            codes = [c.state["terminated"].get("exitCode", 1) for c in self.containers]
            self.phase = "Succeeded" if self.containers and all(code == 0 for code in codes) else "Failed"
        self._publish()
        if reason is None:
            self._delete_from_api()

    def _delete_from_api(self) -> None:
        # A pod bound to a node stays in Terminating until its kubelet confirms its containers are gone.
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        try:
            self.agent.api.call("DELETE", self.path, body)
        except ApiError as error:
            if error.status not in (404, 409):
                raise

    # Status.

    def _publish(self) -> None:
        # Containers' threads publish too; one at a time, so an older status never lands after a newer one.
        with self.publish_lock:
            with self.lock:
                status = self._status()
            self._send(status)

    def _send(self, status: JsonObject) -> None:
        try:
            # A strategic merge keeps conditions that others add (DisruptionTarget, readiness gates'),
            # merging by type, where a JSON merge patch would replace the whole list.
            self.agent.api.call(
                "PATCH", self.path + "/status", {"status": status}, "application/strategic-merge-patch+json"
            )
        except ApiError as error:
            if error.status != 404:
                self.agent.log(f"pod {self.namespace}/{self.name}: status update failed: {error}")

    def _status(self) -> JsonObject:
        """The pod's status as a kubelet reports it. Called with self.lock held."""
        now = now_rfc3339()
        ready = self.phase == "Running" and all(c.ready for c in self.containers)
        terminal = self.phase in ("Succeeded", "Failed")

        def condition(kind: str, value: bool, reason: str | None = None) -> JsonObject:
            status = "True" if value else "False"
            previous = self.condition_transitions.get(kind)
            if previous is None or previous[0] != status:
                self.condition_transitions[kind] = (status, now)
            item: JsonObject = {
                "type": kind,
                "status": status,
                "lastTransitionTime": self.condition_transitions[kind][1],
            }
            if reason is not None and not value:
                item["reason"] = reason
            return item

        completed_reason = "PodCompleted" if terminal else "ContainersNotReady"
        phase = self.phase
        if phase == "Running" and any("waiting" in c.state and not c.last_state for c in self.containers):
            # A container that never started yet (its image is not there): a kubelet reports the pod Pending.
            phase = "Pending"
        status: JsonObject = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "qosClass": self.pod.get("status", {}).get("qosClass", "BestEffort"),
            "conditions": [
                condition("PodReadyToStartContainers", not terminal),
                condition("Initialized", self.initialized, "ContainersNotInitialized"),
                condition("Ready", ready, completed_reason),
                condition("ContainersReady", ready, completed_reason),
                condition("PodScheduled", True),
            ],
            "containerStatuses": [c.status("") for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status("") for c in self.init_containers]
        if self.pod_reason is not None:
            status["reason"], status["message"] = self.pod_reason
        return status

    # Preparing volumes, environment and command.

    def _prepare(self) -> bool:
        """Materialise the volumes; False (and a waiting reason) while something they need is missing."""
        try:
            self._materialise_volumes()
            return True
        except PodConfigError as error:
            with self.lock:
                for container in self.init_containers + self.containers:
                    container.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
            self.agent.event(self.pod, "Warning", "FailedMount", str(error))
            self._publish()
            return False

    def _object(self, kind: str, name: str, optional: bool) -> JsonObject | None:
        try:
            return self.agent.api.get(f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        except ApiError as error:
            if error.status == 404:
                if optional:
                    return None
                singular = "configmap" if kind == "configmaps" else "secret"
                raise PodConfigError(f'{singular} "{name}" not found') from None
            raise

    def _object_files(self, kind: str, source: JsonObject) -> dict[str, bytes]:
        """The files a configMap or secret volume source projects: key or item path → content."""
        name = str(source.get("name") or source.get("secretName") or "")
        found = self._object(kind, name, bool(source.get("optional")))
        if found is None:
            return {}
        contents: dict[str, bytes] = {}
        if kind == "secrets":
            for key, value in found.get("data", {}).items():
                contents[key] = base64.b64decode(value)
        else:
            for key, value in found.get("data", {}).items():
                contents[key] = value.encode()
            for key, value in found.get("binaryData", {}).items():
                contents[key] = base64.b64decode(value)
        items = source.get("items")
        if not items:
            return contents
        selected: dict[str, bytes] = {}
        for item in items:
            if item["key"] not in contents:
                if source.get("optional"):
                    continue
                raise PodConfigError(f'key "{item["key"]}" not found in {kind[:-1]} "{name}"')
            selected[item["path"]] = contents[item["key"]]
        return selected

    def _field_value(self, field_path: str) -> str:
        metadata = self.pod["metadata"]
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field_path)
        if match:
            value: str = metadata.get(match.group(1), {}).get(match.group(2), "")
            return value
        values: dict[str, str] = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.nodeName": self.pod["spec"].get("nodeName", ""),
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.hostIP": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
            "status.podIP": "127.0.0.1",
            "status.podIPs": "127.0.0.1",
        }
        if field_path in ("metadata.labels", "metadata.annotations"):
            entries = metadata.get(field_path.split(".")[1], {})
            return "\n".join(f'{key}="{value}"' for key, value in sorted(entries.items()))
        if field_path not in values:
            raise PodConfigError(f"unsupported fieldRef {field_path}")
        return values[field_path]

    def _service_account_token(self, audience: str | None, expiration_seconds: int) -> str:
        account = self.pod["spec"].get("serviceAccountName", "default")
        body: JsonObject = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else None,
                # A kubelet renews the token before it expires; this agent does not, so it asks for one
                # that outlasts any test or demo instead.
                "expirationSeconds": max(expiration_seconds, 24 * 3600),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid},
            },
        }
        answer = self.agent.api.call(
            "POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token", body
        )
        token: str = answer["status"]["token"]
        return token

    def _projected_files(self, volume: JsonObject) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for source in volume.get("sources", []):
            if "configMap" in source:
                files.update(self._object_files("configmaps", source["configMap"]))
            elif "secret" in source:
                files.update(self._object_files("secrets", source["secret"]))
            elif "downwardAPI" in source:
                files.update(self._downward_files(source["downwardAPI"]))
            elif "serviceAccountToken" in source:
                token_source = source["serviceAccountToken"]
                audience = token_source.get("audience")
                token = self._service_account_token(audience, token_source.get("expirationSeconds", 3600))
                files[token_source["path"]] = token.encode()
                if not audience:
                    self._write_kubeconfig(token)
        return files

    def _downward_files(self, source: JsonObject) -> dict[str, bytes]:
        return {
            item["path"]: self._field_value(item["fieldRef"]["fieldPath"]).encode()
            for item in source.get("items", [])
            if "fieldRef" in item
        }

    def _write_kubeconfig(self, token: str) -> None:
        """A kubeconfig with the pod's own token, for clients outside a real container."""
        api = self.agent.api
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "in-cluster",
                    "cluster": {
                        "server": api.server,
                        "certificate-authority-data": base64.b64encode(api.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "pod", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "in-cluster",
                    "context": {"cluster": "in-cluster", "user": "pod", "namespace": self.namespace},
                }
            ],
            "current-context": "in-cluster",
        }
        path = self.directory / "kubeconfig"
        path.write_text(json.dumps(kubeconfig, indent=2))
        path.chmod(0o600)

    def _materialise_volumes(self) -> None:
        volume_directories: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes", []):
            name = volume["name"]
            directory = self.directory / "volumes" / name
            files: dict[str, bytes] | None = None
            if "configMap" in volume:
                files = self._object_files("configmaps", volume["configMap"])
            elif "secret" in volume:
                files = self._object_files("secrets", volume["secret"])
            elif "projected" in volume:
                files = self._projected_files(volume["projected"])
            elif "downwardAPI" in volume:
                files = self._downward_files(volume["downwardAPI"])
            elif "hostPath" in volume:
                host_path = Path(volume["hostPath"]["path"])
                if volume["hostPath"].get("type") == "DirectoryOrCreate":
                    host_path.mkdir(parents=True, exist_ok=True)
                volume_directories[name] = host_path
                continue
            else:
                # emptyDir, and kinds this agent cannot provide (those start empty, which the log notes).
                if "emptyDir" not in volume:
                    self.agent.log(f"pod {self.namespace}/{self.name}: volume {name} is provided as an empty folder")
                files = {}
            directory.mkdir(parents=True, exist_ok=True)
            for relative, content in files.items():
                target = directory / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            volume_directories[name] = directory

        for container in self.init_containers + self.containers:
            container.paths = PathMap()
            for mount in container.spec.get("volumeMounts", []):
                local = volume_directories.get(mount["name"])
                if local is None:
                    raise PodConfigError(f"volume {mount['name']} is mounted but not defined")
                if mount.get("subPath"):
                    local = local / mount["subPath"]
                container.paths.add(mount["mountPath"], local)
            message_path = container.spec.get("terminationMessagePath", "/dev/termination-log")
            local_message = self.root / container.name / message_path.lstrip("/")
            local_message.parent.mkdir(parents=True, exist_ok=True)
            local_message.unlink(missing_ok=True)
            container.paths.add(message_path, local_message)
            container.termination_message_file = local_message

    def _environment(self, container: ContainerRun) -> dict[str, str]:
        environment: dict[str, str] = {}
        agent_environment = os.environ
        python_bin = str(Path(sys.executable).parent)
        environment["PATH"] = f"{python_bin}:{agent_environment.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
        for name, value in agent_environment.items():
            if name in PASSED_ON_VARIABLES or name.startswith(PASSED_ON_PREFIXES):
                environment[name] = value
        environment["HOSTNAME"] = self.name
        if (self.directory / "kubeconfig").exists():
            environment["KUBECONFIG"] = str(self.directory / "kubeconfig")

        spec = container.spec
        for source in spec.get("envFrom", []):
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                kind, reference = "configmaps", source["configMapRef"]
            else:
                kind, reference = "secrets", source["secretRef"]
            found = self._object(kind, reference["name"], bool(reference.get("optional")))
            for key, value in (found or {}).get("data", {}).items():
                environment[prefix + key] = base64.b64decode(value).decode() if kind == "secrets" else value
        for variable in spec.get("env", []):
            name = variable["name"]
            if "valueFrom" not in variable:
                environment[name] = container.paths.rewrite(expand_references(variable.get("value", ""), environment))
                continue
            value_from = variable["valueFrom"]
            if "fieldRef" in value_from:
                environment[name] = self._field_value(value_from["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in value_from or "secretKeyRef" in value_from:
                kind = "configmaps" if "configMapKeyRef" in value_from else "secrets"
                reference = value_from.get("configMapKeyRef") or value_from["secretKeyRef"]
                found = self._object(kind, reference["name"], bool(reference.get("optional")))
                data = (found or {}).get("data", {})
                if reference["key"] not in data:
                    if reference.get("optional"):
                        continue
                    raise PodConfigError(
                        f"couldn't find key {reference['key']} in {kind[:-1]} {self.namespace}/{reference['name']}"
                    )
                raw = data[reference["key"]]
                environment[name] = base64.b64decode(raw).decode() if kind == "secrets" else raw
            elif "resourceFieldRef" in value_from:
                environment[name] = self._resource_value(container, value_from["resourceFieldRef"])
        return environment

    @staticmethod
    def _resource_value(container: ContainerRun, reference: JsonObject) -> str:
        section, _, resource = reference["resource"].partition(".")
        value = container.spec.get("resources", {}).get(section, {}).get(resource)
        if value is None:
            # Without a limit a kubelet reports the node's allocatable amount.
            return "32" if resource == "cpu" else str(256 * 2**30)
        return str(value)

    def _command(self, container: ContainerRun) -> tuple[list[str], dict[str, str], str]:
        environment = self._environment(container)
        spec = container.spec
        command = list(spec.get("command") or self.agent.default_entrypoint)
        arguments = list(spec.get("args", []))
        argv = [container.paths.rewrite(expand_references(part, environment)) for part in command + arguments]
        executable = argv[0]
        if "/" in executable and not os.access(executable, os.X_OK):
            # A path inside the image (/usr/local/bin/batchmark, /opt/venv/bin/python): take the program of
            # that name from PATH instead.
            executable = Path(executable).name
        if "/" not in executable:
            found = shutil.which(executable, path=environment["PATH"])
            if found is None:
                raise PodConfigError(f'exec: "{executable}": executable file not found in $PATH')
            argv[0] = found
        working_directory = spec.get("workingDir")
        if working_directory:
            local = container.paths.local(working_directory) or str(self.root / working_directory.lstrip("/"))
        else:
            local = str(self.root)
        Path(local).mkdir(parents=True, exist_ok=True)
        return argv, environment, local


class NodeAgent:
    """Watches the pods bound to its nodes and runs each with a PodWorker."""

    def __init__(
        self,
        api: KubeApi,
        node_names: list[str],
        work_directory: Path,
        pid_directory: Path | None,
        default_entrypoint: list[str],
        images: Iterable[str] = PROJECT_IMAGES,
    ) -> None:
        self.api = api
        self.node_names = set(node_names)
        self.work_directory = work_directory
        self.pid_directory = pid_directory
        self.default_entrypoint = default_entrypoint
        self.images = ImageStore(images)
        self.workers: dict[str, PodWorker] = {}
        self.finished: set[str] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._log_lock = threading.Lock()
        self.memory_limits = MemoryLimits(self.log)
        # A repeated event is counted on the first one's object, as a kubelet's event recorder does:
        # (pod uid, type, reason, message) -> (event name, count).
        self._events: dict[tuple[str, str, str, str], tuple[str, int]] = {}
        self._events_lock = threading.Lock()

    def log(self, message: str) -> None:
        with self._log_lock:
            print(f"{now_rfc3339()} {message}", flush=True)

    def event(self, pod: JsonObject, event_type: str, reason: str, message: str) -> None:
        """Record an event on the pod, as a kubelet does (a repeat counted on the first); losing one is harmless."""
        metadata = pod["metadata"]
        now = now_rfc3339()
        key = (metadata["uid"], event_type, reason, message)
        with self._events_lock:
            known = self._events.get(key)
        if known is not None:
            name, count = known
            try:
                self.api.call(
                    "PATCH",
                    f"/api/v1/namespaces/{metadata['namespace']}/events/{name}",
                    {"count": count + 1, "lastTimestamp": now},
                    "application/merge-patch+json",
                )
                with self._events_lock:
                    self._events[key] = (name, count + 1)
                return
            except (ApiError, OSError) as error:
                self.log(f"event {reason} on {metadata['name']} not counted, recorded anew: {error}")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata["uid"],
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            created = self.api.call("POST", f"/api/v1/namespaces/{metadata['namespace']}/events", body)
        except (ApiError, OSError) as error:
            self.log(f"event {reason} on {metadata['name']} not recorded: {error}")
            return
        with self._events_lock:
            self._events[key] = (created["metadata"]["name"], 1)

    def record_process(self, worker: PodWorker, container: ContainerRun, process: subprocess.Popen[bytes]) -> None:
        """Record a pod's process where `down` finds it, so none outlives the cluster."""
        if self.pid_directory is None:
            return
        stat = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        record = {
            "name": self._record_name(worker, container),
            "pid": process.pid,
            "start_ticks": int(stat[19]),
        }
        path = self.pid_directory / f"{record['name']}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def forget_process(self, worker: PodWorker, container: ContainerRun) -> None:
        if self.pid_directory is not None:
            (self.pid_directory / f"{self._record_name(worker, container)}.json").unlink(missing_ok=True)

    @staticmethod
    def _record_name(worker: PodWorker, container: ContainerRun) -> str:
        return f"pod-{worker.uid}-{container.name}"

    def container_log(self, namespace: str, pod: str, container: str) -> Path | None:
        """The output file of a container of the newest pod so named, if it ran here."""
        candidates = sorted(
            (self.work_directory / "pods").glob(f"{namespace}_{pod}_*/{container}.log"),
            key=lambda path: path.stat().st_mtime,
        )
        return candidates[-1] if candidates else None

    def runs(self, namespace: str, pod: str) -> bool:
        """Whether a pod so named still runs here (so following its log should go on)."""
        with self.lock:
            return any(w.namespace == namespace and w.name == pod for w in self.workers.values())

    def announce_log_port(self, port: int) -> None:
        """Tell the API server where the nodes' `kubectl logs` endpoint is, as a kubelet's status does."""
        for node in self.node_names:
            body = {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}
            self.api.call("PATCH", f"/api/v1/nodes/{node}/status", body, "application/strategic-merge-patch+json")

    def worker_finished(self, worker: PodWorker) -> None:
        with self.lock:
            self.workers.pop(worker.uid, None)
            self.finished.add(worker.uid)
        with self._events_lock:
            for key in [key for key in self._events if key[0] == worker.uid]:
                del self._events[key]

    def handle(self, event_type: str, pod: JsonObject) -> None:
        """React to one observed state of a pod."""
        if pod.get("spec", {}).get("nodeName") not in self.node_names:
            return
        metadata = pod["metadata"]
        uid = metadata["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            already_finished = uid in self.finished
        if event_type == "DELETED":
            if worker is not None:
                worker.request_stop(2, gone=True)
            return
        deleting = metadata.get("deletionTimestamp") is not None
        phase = pod.get("status", {}).get("phase")
        if worker is not None:
            worker.pod = pod
            if deleting:
                worker.request_stop(float(metadata.get("deletionGracePeriodSeconds", 30)))
            return
        if deleting:
            # Nothing runs for it here (any more); confirm the deletion.
            try:
                self.api.call(
                    "DELETE",
                    f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}",
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid},
                    },
                )
            except ApiError as error:
                if error.status not in (404, 409):
                    self.log(f"deleting {metadata['name']} failed: {error}")
            return
        if already_finished or phase in ("Succeeded", "Failed"):
            return
        if self._was_started(pod) and pod["spec"].get("restartPolicy") == "Never":
            # It ran before this agent started (the agent was restarted): its processes are gone, and a
            # kubelet that cannot find a container of a pod that must not restart reports it so.
            self._report_lost(pod)
            return
        worker = PodWorker(self, pod)
        with self.lock:
            self.workers[uid] = worker
        self.log(f"pod {metadata['namespace']}/{metadata['name']}: starting")
        worker.start()

    @staticmethod
    def _was_started(pod: JsonObject) -> bool:
        return any(
            "running" in status.get("state", {}) or "terminated" in status.get("state", {})
            for status in pod.get("status", {}).get("containerStatuses", [])
        )

    def _report_lost(self, pod: JsonObject) -> None:
        metadata = pod["metadata"]
        now = now_rfc3339()
        statuses = [
            {
                **status,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "finishedAt": now,
                    }
                },
            }
            for status in pod["status"]["containerStatuses"]
        ]
        not_ready = [
            {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
            for kind in ("Ready", "ContainersReady")
        ]
        body = {"status": {"phase": "Failed", "containerStatuses": statuses, "conditions": not_ready}}
        self.log(f"pod {metadata['namespace']}/{metadata['name']}: lost in an agent restart")
        try:
            self.api.call(
                "PATCH",
                f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}/status",
                body,
                "application/strategic-merge-patch+json",
            )
        except ApiError as error:
            self.log(f"reporting {metadata['name']} lost failed: {error}")

    def run(self, ready_file: Path | None) -> None:
        """List and watch pods until stop() is called."""
        path = "/api/v1/pods?fieldSelector=" + urllib.parse.quote("spec.nodeName!=")
        heartbeat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        heartbeat.start()
        while not self.stopping.is_set():
            try:
                listing = self.api.get(path)
                for pod in listing.get("items", []):
                    self.handle("ADDED", pod)
                if ready_file is not None:
                    ready_file.touch()
                    ready_file = None
                resource_version: str = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for event in self.api.watch(path, resource_version, timeout_seconds=60):
                        if event["type"] == "ERROR":
                            raise ApiError(event["object"].get("code", 500), json.dumps(event["object"]))
                        resource_version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.handle(event["type"], event["object"])
                        if self.stopping.is_set():
                            break
            except (ApiError, OSError, ValueError) as error:
                if self.stopping.is_set():
                    break
                # 410 Gone (the resource version is too old) and broken connections: list again.
                self.log(f"watch restarted after: {error}")
                self.stopping.wait(1)

    def _heartbeat(self) -> None:
        """Keep the nodes' Ready condition fresh, as a kubelet's status updates do."""
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            for node in self.node_names:
                body = {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "True",
                                "reason": "KubeletReady",
                                "lastHeartbeatTime": now_rfc3339(),
                            }
                        ]
                    }
                }
                try:
                    self.api.call(
                        "PATCH",
                        f"/api/v1/nodes/{node}/status",
                        body,
                        "application/strategic-merge-patch+json",
                    )
                except (ApiError, OSError) as error:
                    self.log(f"heartbeat of {node} failed: {error}")

    def stop(self) -> None:
        """Stop all pods' processes (SIGTERM, SIGKILL after a short grace), leaving the pod objects be."""
        self.stopping.set()
        with self.lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.request_stop(3, gone=True)
        for worker in workers:
            worker.thread.join(timeout=10)


class ContainerLogServer(http.server.ThreadingHTTPServer):
    """The part of a kubelet's API that `kubectl logs` reaches through the API server: containerLogs.

    The API server connects to the node's address and `status.daemonEndpoints.kubeletEndpoint.Port`; all fake
    nodes share this one server on 127.0.0.1.
    """

    daemon_threads = True

    def __init__(self, agent: NodeAgent, certificate: Path, key: Path) -> None:
        super().__init__(("127.0.0.1", 0), _ContainerLogHandler)
        self.agent = agent
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certificate), str(key))
        self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


class _ContainerLogHandler(http.server.BaseHTTPRequestHandler):
    server: ContainerLogServer

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not worth a line in the agent's log each."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if parts == ["healthz"]:
            self._answer(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._answer(404, b"not found")
            return
        namespace, pod, container = parts[1:]
        log_path = self.server.agent.container_log(namespace, pod, container)
        if log_path is None:
            self._answer(404, f"no log of container {container} of pod {namespace}/{pod}".encode())
            return
        query = urllib.parse.parse_qs(url.query)
        follow = query.get("follow", ["false"])[0] == "true"
        tail_lines = int(query["tailLines"][0]) if "tailLines" in query else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        # A client that stops reading (kubectl logs -f interrupted) is no error.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self._stream(log_path, namespace, pod, follow, tail_lines)

    def _stream(self, log_path: Path, namespace: str, pod: str, follow: bool, tail_lines: int | None) -> None:
        with log_path.open("rb") as log:
            if tail_lines is not None:
                lines = log.read().splitlines(keepends=True)
                self.wfile.write(b"".join(lines[-tail_lines:] if tail_lines else []))
            else:
                self.wfile.write(log.read())
            self.wfile.flush()
            while follow:
                chunk = log.read()
                if chunk:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                elif not self.server.agent.runs(namespace, pod):
                    return
                else:
                    time.sleep(0.2)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _image_argument(value: str) -> str:
    try:
        ImageReference.parse(value, wildcard=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{value}: {error}") from None
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True, type=Path, help="credentials allowed to manage pods and nodes")
    parser.add_argument("--node", action="append", required=True, help="name of a node to run pods for (repeatable)")
    parser.add_argument("--work-dir", required=True, type=Path, help="folder for the pods' files and logs")
    parser.add_argument("--pid-dir", type=Path, help="folder where each pod process' PID is recorded")
    parser.add_argument("--ready-file", type=Path, help="file created once the first list of pods is handled")
    parser.add_argument("--tls-cert-file", type=Path, help="serving certificate for `kubectl logs` requests")
    parser.add_argument("--tls-private-key-file", type=Path, help="its key")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        type=_image_argument,
        help="an image present on the nodes besides the project's own (repeatable; the tag `*`: every tag); "
        "any other image cannot be pulled",
    )
    parser.add_argument(
        "--default-entrypoint",
        default="batchmark",
        help="command for containers without `command` (the image's entrypoint is unknown here)",
    )
    arguments = parser.parse_args(argv)
    arguments.work_dir.mkdir(parents=True, exist_ok=True)
    credentials = Path(tempfile.mkdtemp(prefix="credentials-", dir=arguments.work_dir))
    agent = NodeAgent(
        KubeApi(arguments.kubeconfig, credentials),
        arguments.node,
        arguments.work_dir,
        arguments.pid_dir,
        arguments.default_entrypoint.split(),
        [*PROJECT_IMAGES, *arguments.image],
    )

    def on_signal(signal_number: int, _frame: object) -> None:
        agent.log(f"signal {signal_number}: stopping")
        agent.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if arguments.tls_cert_file is not None and arguments.tls_private_key_file is not None:
        log_server = ContainerLogServer(agent, arguments.tls_cert_file, arguments.tls_private_key_file)
        threading.Thread(target=log_server.serve_forever, name="logs", daemon=True).start()
        agent.announce_log_port(log_server.port)
    watcher = threading.Thread(target=agent.run, args=(arguments.ready_file,), name="watch", daemon=True)
    watcher.start()
    agent.log(f"node agent for {', '.join(sorted(agent.node_names))} started")
    # A timed wait, so the signal handler's flag is seen promptly whatever the platform's lock semantics.
    while not agent.stopping.wait(1):
        pass
    agent.stop()
    agent.log("node agent stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
