"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, with nodes that are real kubelets over containerd running pods as containers of their images
(kubelets.py): two with fake GPUs and one plain node. Or (runtime="no-nodes") with no nodes at all, for tests
and benchmarks that need only the API server: their pods stay Pending.

Used by the `kube_cluster` pytest fixture and by the `up`, `down` and `demo` scripts next to this file.
Run `scripts/setup/cluster.sh` once first: it installs etcd and builds the Kubernetes binaries.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from devtools.cluster import processes
from devtools.cluster.pki import FRONT_PROXY_CLIENT_NAME, CertificatePair, ClusterPki, make_cluster_pki

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from devtools.cluster.kubelets import KubeletNode, PodNetwork, RuntimeBinaries

CLUSTER_DIRECTORY = Path(__file__).resolve().parent

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
# Each waits 10 s (client-go's TLS handshake timeout): a minute in all for a stalled API server.
REQUEST_ATTEMPTS = 6
# How a request can fail before the API server has it whole: a handshake that timed out, or that the server ended
# (an unexpected EOF, or a reset). Other TLS errors, a certificate refused, say, would fail again the same way.
UNSENT_FAILURES = (TimeoutError, ssl.SSLEOFError, ConnectionResetError)


class ClusterError(RuntimeError):
    """The control plane could not be started or is unusable; the message says what to do."""


class ClusterBinariesMissingError(ClusterError):
    """The Kubernetes binaries or etcd are not installed; `scripts/setup/cluster.sh` installs them."""


def pinned_version(go_mod: Path, module: str) -> str:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise ClusterError(f"{go_mod} does not require {module}")
    return match.group(1)


def kubernetes_version() -> str:
    """The Kubernetes release the tools module pins, e.g. v1.37.2."""
    return pinned_version(CLUSTER_DIRECTORY / "go" / "kube" / "go.mod", "k8s.io/kubernetes")


def helm_version() -> str:
    """The Helm release the helm module pins."""
    return pinned_version(CLUSTER_DIRECTORY / "go" / "helm" / "go.mod", "helm.sh/helm/v4")


def cache_directory() -> Path:
    """Where built binaries are kept between runs; BATCHMARK_CLUSTER_CACHE overrides it."""
    override = os.environ.get("BATCHMARK_CLUSTER_CACHE")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "batchmark" / "cluster"


@dataclass(frozen=True)
class Binaries:
    """Paths of the programs a control plane runs; helm is None when it was not built."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    helm: Path | None


def locate_binaries() -> Binaries:
    """Find the cached Kubernetes binaries and etcd, or say how to get them."""
    kube_directory = cache_directory() / kubernetes_version()
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    missing = [name for name in names if not os.access(kube_directory / name, os.X_OK)]
    etcd = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if etcd is None:
        missing.append("etcd (Debian package etcd-server)")
    if missing:
        raise ClusterBinariesMissingError(
            f"missing {', '.join(missing)} (looked in {kube_directory}); run scripts/setup/cluster.sh to install them"
        )
    helm = cache_directory() / f"helm-{helm_version()}" / "helm"
    return Binaries(
        etcd=Path(etcd) if etcd else Path("/usr/bin/etcd"),
        kube_apiserver=kube_directory / "kube-apiserver",
        kube_controller_manager=kube_directory / "kube-controller-manager",
        kube_scheduler=kube_directory / "kube-scheduler",
        kubectl=kube_directory / "kubectl",
        helm=helm if os.access(helm, os.X_OK) else None,
    )


def locate_runtime_binaries() -> RuntimeBinaries:
    """The kubelet, containerd, crictl, the CNI plugins and the pause program (built by
    scripts/setup/cluster-binaries.sh), runc and iptables (Debian's), or say how to get them."""
    from devtools.cluster.kubelets import RuntimeBinaries

    cache = cache_directory()
    go = CLUSTER_DIRECTORY / "go"
    binaries = RuntimeBinaries(
        kubelet=cache / f"kubelet-{kubernetes_version()}" / "kubelet",
        pause=cache / f"kubelet-{kubernetes_version()}" / "pause",
        containerd_directory=cache
        / f"containerd-{pinned_version(go / 'containerd' / 'go.mod', 'github.com/containerd/containerd/v2')}",
        crictl=cache / f"crictl-{pinned_version(go / 'critools' / 'go.mod', 'sigs.k8s.io/cri-tools')}" / "crictl",
        cni_directory=cache
        / f"cni-plugins-{pinned_version(go / 'cni' / 'go.mod', 'github.com/containernetworking/plugins')}",
        runc=Path(shutil.which("runc") or "/usr/sbin/runc"),
        iptables=Path(shutil.which("iptables") or "/usr/sbin/iptables"),
    )
    missing = binaries.missing()
    if missing:
        raise ClusterBinariesMissingError(
            f"missing {', '.join(missing)}; run scripts/setup/cluster.sh to install them (the containers runtime)"
        )
    return binaries


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _base64_file(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def write_kubeconfig(
    path: Path,
    server: str,
    ca_certificate: Path,
    user: str,
    *,
    client: CertificatePair | None = None,
    token: str | None = None,
    namespace: str = "default",
) -> None:
    """Write a self-contained kubeconfig (credentials embedded), readable by kubectl, helm and the clients."""
    credentials: dict[str, str] = {}
    if client is not None:
        credentials["client-certificate-data"] = _base64_file(client.certificate)
        credentials["client-key-data"] = _base64_file(client.key)
    if token is not None:
        credentials["token"] = token
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "batchmark-test",
                "cluster": {"server": server, "certificate-authority-data": _base64_file(ca_certificate)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {
                "name": "batchmark-test",
                "context": {"cluster": "batchmark-test", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "batchmark-test",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # JSON is YAML, and keeps this module free of a YAML dependency.
    path.write_text(json.dumps(kubeconfig, indent=2))
    path.chmod(0o600)


def node_manifest(name: str, gpus: int, gpu_product: str) -> dict[str, Any]:
    """A Node as its kubelet would register it; with GPUs, also as NVIDIA's device plugin and GPU feature
    discovery label and taint it. Without GPUs (gpus=0) it is a plain node for the operator and the like."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "batchmark.dev/fake-node": "true",
    }
    spec: dict[str, Any] = {}
    if gpus:
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": gpu_product,
            "nvidia.com/gpu.count": str(gpus),
        }
        spec["taints"] = [GPU_TAINT]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}


@dataclass
class ClusterLayout:
    """The files of one run, all under its run directory."""

    run_directory: Path

    @property
    def pki_directory(self) -> Path:
        return self.run_directory / "pki"

    @property
    def log_directory(self) -> Path:
        return self.run_directory / "logs"

    @property
    def pid_directory(self) -> Path:
        return self.run_directory / "pids"

    @property
    def kubeconfig(self) -> Path:
        return self.run_directory / "admin.kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.run_directory / "cluster.json"

    @property
    def audit_log(self) -> Path:
        return self.log_directory / "audit.jsonl"


@dataclass
class ControlPlane:
    """One local control plane. start() brings it up, stop() stops every process it started, by PID."""

    run_directory: Path
    binaries: Binaries = field(default_factory=locate_binaries)
    gpu_node_names: tuple[str, ...] = ("gpu-node-0", "gpu-node-1")
    # Untainted and without GPUs: where pods that do not ask for GPUs run, such as the operator's.
    cpu_node_names: tuple[str, ...] = ("cpu-node-0",)
    gpus_per_node: int = 8
    gpu_product: str = DEFAULT_GPU_PRODUCT
    # "containers": a real kubelet and containerd per node, started with the control plane, running pods as
    # containers of their images (load_images puts images on the nodes). "no-nodes": no node at all, for
    # tests and benchmarks that need only the API server; a pod is never scheduled and stays Pending.
    runtime: Literal["containers", "no-nodes"] = "containers"
    # An audit policy (audit.k8s.io/v1 Policy) for the API server, whose events it then writes to
    # ``layout.audit_log`` as JSON lines: the API server's own microsecond times of the requests it names, for
    # benchmarks that time what happens between two writes without the lag of a watcher's process.
    audit_policy: Mapping[str, Any] | None = None
    server: str = ""
    _pki: ClusterPki | None = None
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _network: PodNetwork | None = None
    _kubelet_nodes: list[KubeletNode] = field(default_factory=list)
    _admin_client: ApiClient | None = field(default=None, repr=False)

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout(self.run_directory)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (group system:masters)."""
        return self.layout.kubeconfig

    @property
    def pki(self) -> ClusterPki:
        if self._pki is None:
            raise ClusterError("the control plane has not been started")
        return self._pki

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()  # __exit__ is not called when __enter__ fails: what did start must not leak
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self, timeout_seconds: float = 120) -> None:
        """Start everything, and the nodes (containers runtime), and wait until pods can be created."""
        self.run_directory.mkdir(parents=True, exist_ok=True)
        # Ports are picked free just before use; another run may still grab one in between, which shows as
        # an early exit of the component, so such a start is retried with new ports.
        for attempt in range(3):
            try:
                self._start_once(timeout_seconds)
                return
            except _PortTakenError:
                self.stop()
                if attempt == 2:
                    raise ClusterError("could not find free ports for the control plane") from None
        raise AssertionError("unreachable")

    def _start_once(self, timeout_seconds: float) -> None:
        deadline = time.monotonic() + timeout_seconds
        layout = self.layout
        # A failed earlier attempt leaves etcd data bound to that attempt's peer URL.
        shutil.rmtree(self.run_directory / "etcd", ignore_errors=True)
        extra_addresses: tuple[str, ...] = ()
        service_range = "10.96.0.0/16"
        if self.runtime == "containers":
            from devtools.cluster.kubelets import allocate_pod_network

            self._network = allocate_pod_network(self.run_directory, locate_runtime_binaries().iptables)
            # Pods reach the API server at the `kubernetes` Service's address, the first of the Service range,
            # which is the host's on the pod network's bridge; the nodes (kubelets) at the bridge's gateway.
            extra_addresses = (self._network.gateway, self._network.api_address)
            service_range = self._network.service_range
        self._pki = make_cluster_pki(layout.pki_directory, extra_addresses)
        etcd_client_port, etcd_peer_port, apiserver_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{apiserver_port}"
        self._admin_client = None  # one of an earlier start would call the old port

        self._start_component(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=batchmark-test",
                f"--data-dir={self.run_directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-cluster=batchmark-test=http://127.0.0.1:{etcd_peer_port}",
                # Test data is thrown away; waiting for fsync only slows every write.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        pki = self.pki
        self._start_component(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{etcd_client_port}",
                # Pods of the containers runtime reach it too: a DNAT rule on their bridge sends them here.
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={apiserver_port}",
                f"--cert-dir={self.run_directory / 'apiserver'}",
                f"--tls-cert-file={pki.apiserver.certificate}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.certificate}",
                "--authorization-mode=RBAC",
                # On top of the default plugins, as OpenShift: setting blockOwnerDeletion needs update on the
                # owner's finalizers.
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.service_account_public_key}",
                f"--service-account-signing-key-file={pki.service_account_private_key}",
                f"--service-cluster-ip-range={service_range}",
                # No kubelets or kube-proxy serve the `kubernetes` Service's endpoints here.
                "--endpoint-reconciler-type=none",
                # Every node's kubelet listens on the pod network's gateway, its InternalIP.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={pki.ca.certificate}",
                # The aggregation layer (APIServices such as Kueue's visibility API): the API server proxies to
                # an aggregated server as the front-proxy client, passing the user in these headers; the
                # aggregated server reads the CA and names to trust from kube-system's
                # extension-apiserver-authentication ConfigMap, which these flags make the API server publish.
                f"--requestheader-client-ca-file={pki.front_proxy_ca.certificate}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT_NAME}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-uid-headers=X-Remote-Uid",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.certificate}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *self._audit_arguments(),
            ],
        )

        for name, pair in (("controller-manager", pki.controller_manager), ("scheduler", pki.scheduler)):
            user = f"system:kube-{name}"
            write_kubeconfig(
                self.run_directory / f"{name}.kubeconfig", self.server, pki.ca.certificate, user, client=pair
            )
        write_kubeconfig(layout.kubeconfig, self.server, pki.ca.certificate, "batchmark-admin", client=pki.admin)

        # The controller manager gives up (exits) when the API server is not healthy to it within about 10 s,
        # and until the API server has made its bootstrap RBAC roles it is not: on a loaded machine that
        # takes longer. So both start once the API server is ready.
        self._wait_until(deadline, "kube-apiserver /readyz", lambda: self._get("/readyz") is not None)
        self._start_component(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={self.run_directory / 'controller-manager.kubeconfig'}",
                # Off: the control plane sets the nodes' taints itself (_start_kubelet_nodes), and a
                # kubelet's heartbeat late on a loaded machine must not get its pods evicted.
                "--controllers=*,-node-lifecycle-controller",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki.ca.certificate}",
                f"--service-account-private-key-file={pki.service_account_private_key}",
                f"--cluster-signing-cert-file={pki.ca.certificate}",
                f"--cluster-signing-key-file={pki.ca.key}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )
        self._start_component(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                f"--kubeconfig={self.run_directory / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )

        if self.runtime == "containers":
            self._start_kubelet_nodes(apiserver_port, deadline)
        # The service-account controller creates `default` in each namespace; its presence shows the
        # controller manager works, and pods cannot be created before it exists.
        self._wait_until(
            deadline,
            "the default ServiceAccount",
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
        )
        self._write_state()

    def _audit_arguments(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.run_directory / "audit-policy.json"
        policy.write_text(json.dumps(self.audit_policy))  # JSON is YAML
        self.layout.audit_log.parent.mkdir(parents=True, exist_ok=True)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.layout.audit_log}",
            "--audit-log-format=json",
            # Batched: the writes leave the requests' path (the events' times are taken in it all the same).
            "--audit-log-mode=batch",
        ]

    def _start_component(self, name: str, command: list[str]) -> None:
        process, _ = processes.start_detached(
            name, command, self.layout.log_directory / f"{name}.log", self.layout.pid_directory
        )
        self._children.append(process)

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "nodes": list(self.node_names),
            "kubernetes_version": kubernetes_version(),
        }
        self.layout.state_file.write_text(json.dumps(state, indent=2))

    def _check_children(self) -> None:
        for process in self._children:
            if process.poll() is not None:
                name = Path(str(process.args[0])).name if isinstance(process.args, list) else str(process.args)
                log = self.layout.log_directory / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                if "address already in use" in tail:
                    raise _PortTakenError()
                raise ClusterError(f"{name} exited with status {process.returncode}; end of {log}:\n{tail}")

    def _wait_until(self, deadline: float, what: str, condition: Any) -> None:
        while True:
            self._check_children()
            if condition():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}; logs are in {self.layout.log_directory}")
            time.sleep(0.1)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.certificate))
        context.load_cert_chain(str(self.pki.admin.certificate), str(self.pki.admin.key))
        return context

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """One API request as the admin; returns the decoded JSON answer, raising HTTPError on failure.

        A loaded machine can stall the API server past the timeout (its etcd waiting on a disk busy importing an
        image; CI saw its TLS handshakes stall for over 20 s), or the server can drop a handshake whose deadline
        passed while the machine stood still (CI saw an EOF mid-handshake). A request that failed before it was
        sent whole (connecting, the TLS handshake: urlopen wraps those in a URLError) cannot have been done, so it
        is sent again, up to REQUEST_ATTEMPTS times; a GET whose answer did not come is asked again too, as the
        Kubernetes clients retry an idempotent read (a write whose answer did not come may have been done, and
        is not). A refused connection is not: the server is not there, which is what a caller waiting for it
        needs to know."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        for attempt in range(1, REQUEST_ATTEMPTS + 1):
            try:
                with urllib.request.urlopen(request, context=self._ssl_context(), timeout=10) as answer:
                    payload = answer.read()
                break
            except (TimeoutError, urllib.error.URLError) as error:
                # urlopen wraps a failure while connecting or sending in a URLError; one while reading is bare.
                unsent = isinstance(error, urllib.error.URLError) and isinstance(error.reason, UNSENT_FAILURES)
                unanswered_read = isinstance(error, TimeoutError) and method == "GET"
                if attempt == REQUEST_ATTEMPTS or not (unsent or unanswered_read):
                    raise
        return json.loads(payload) if payload.startswith(b"{") else payload.decode()

    def _get(self, path: str) -> Any:
        """The answer to a GET, or None while the server is not there or says no."""
        try:
            return self.request("GET", path)
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return None

    @property
    def pod_network(self) -> PodNetwork:
        """The pods' network (runtime "containers"): pods reach this machine at its ``gateway``, so a server a
        test starts for pods to use listens there."""
        if self._network is None:
            raise ClusterError('the control plane has no pod network (not started, or runtime "no-nodes")')
        return self._network

    @property
    def node_names(self) -> tuple[str, ...]:
        """The nodes' names; none without nodes (runtime="no-nodes")."""
        if self.runtime == "no-nodes":
            return ()
        return self.gpu_node_names + self.cpu_node_names

    def _start_kubelet_nodes(self, apiserver_port: int, deadline: float) -> None:
        """A containerd and a kubelet per node; each node, once its kubelet registered it, gets the fake GPUs'
        capacity (a node status patch, as Kubernetes documents for extended resources), and its taints (the
        not-ready one, which the node lifecycle controller lifts, is off here)."""
        from devtools.cluster.kubelets import KubeletNode, node_directory, start_cluster_dns

        assert self._network is not None
        binaries = locate_runtime_binaries()
        self._network.route_api_server(binaries.iptables, apiserver_port)
        start_cluster_dns(
            self._network,
            self.layout.log_directory,
            self.layout.pid_directory,
            server=self.server,
            certificate_authority=self.pki.ca.certificate,
            client_certificate=self.pki.admin.certificate,
            client_key=self.pki.admin.key,
        )
        for index, name in enumerate(self.node_names):
            gpus = self.gpus_per_node if name in self.gpu_node_names else 0
            manifest = node_manifest(name, gpus, self.gpu_product)
            # The kubelet sets the kubernetes.io labels itself, and may not set others in that namespace.
            labels = {
                key: value for key, value in manifest["metadata"]["labels"].items() if "kubernetes.io/" not in key
            }
            node = KubeletNode(
                name=name,
                index=index,
                directory=node_directory(self.run_directory, self._network, name),
                network=self._network,
                binaries=binaries,
                labels=labels,
                taints=manifest["spec"].get("taints", []),
                kubelet_port=free_port(),
                healthz_port=free_port(),
            )
            self._kubelet_nodes.append(node)
            node.start_containerd(self.layout.log_directory, self.layout.pid_directory)
            node.write_record()
            node.start_kubelet(
                self.kubeconfig,
                self.pki.kubelet.certificate,
                self.pki.kubelet.key,
                self.layout.log_directory,
                self.layout.pid_directory,
            )
        for name in self.node_names:
            self._wait_until(deadline, f"the kubelet of {name} to register it", partial(self._node_ready, name))
            gpus = self.gpus_per_node if name in self.gpu_node_names else 0
            taints = node_manifest(name, gpus, self.gpu_product)["spec"].get("taints")
            self.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}}, "application/merge-patch+json")
            if gpus:
                capacity = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(gpus)}]
                self.request("PATCH", f"/api/v1/nodes/{name}/status", capacity, "application/json-patch+json")
        self._wait_until(deadline, "the fake GPUs to be allocatable", self._gpus_allocatable)

    def _node_ready(self, name: str) -> bool:
        node = self._get(f"/api/v1/nodes/{name}")
        conditions = (node or {}).get("status", {}).get("conditions", []) if isinstance(node, dict) else []
        return any(item["type"] == "Ready" and item["status"] == "True" for item in conditions)

    def _gpus_allocatable(self) -> bool:
        for name in self.gpu_node_names:
            node = self._get(f"/api/v1/nodes/{name}")
            allocatable = node.get("status", {}).get("allocatable", {}) if isinstance(node, dict) else {}
            if allocatable.get("nvidia.com/gpu") != str(self.gpus_per_node):
                return False
        return True

    def load_images(
        self, archives: Sequence[Path], names: Mapping[str, Sequence[str]] | None = None, untainted_only: bool = False
    ) -> None:
        """Put images on every node (containers runtime): archives as `podman save` writes them, and further
        names for an imported image (e.g. the name a manifest uses for it). `untainted_only`: on the nodes
        without taints alone, for an image only pods without tolerations run (the operator's): importing a
        900 MB image costs a node's containerd some 20 s of CPU."""
        if self.runtime != "containers":
            raise ClusterError("images are loaded onto nodes of the containers runtime only")
        for node in self._kubelet_nodes:
            if not (untainted_only and node.taints):
                node.import_images(archives, names)

    def load_saved_image(
        self, save: Sequence[str], names: Mapping[str, Sequence[str]], untainted_only: bool = False
    ) -> None:
        """Put an image on every node (or the untainted ones) from the command that saves it to its standard
        output (images.save_command), with no archive on disk: for an image of several GB (the CPU runner's)."""
        if self.runtime != "containers":
            raise ClusterError("images are loaded onto nodes of the containers runtime only")
        for node in self._kubelet_nodes:
            if not (untainted_only and node.taints):
                node.import_saved(save, names)

    def api_client(self) -> ApiClient:
        """A client of the official `kubernetes` package, authenticated as the admin: one per control plane and
        process, reused by every call. A new client per call made its own TLS connection: 21 ms of the
        caller's CPU per request instead of 1 ms, and a handshake for the API server, five times a second from
        each test that polls a status. (Its `close()` ends only the client's thread pool, so a caller that
        closes it leaves it usable.)"""
        if self._admin_client is None:
            from kubernetes.client import ApiClient, Configuration

            configuration = Configuration(
                host=self.server,
                ssl_ca_cert=str(self.pki.ca.certificate),
                cert_file=str(self.pki.admin.certificate),
                key_file=str(self.pki.admin.key),
            )
            self._admin_client = ApiClient(configuration)
        return self._admin_client

    def kubectl(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the admin; output captured as text."""
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *arguments],
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def wait(self, *arguments: str, timeout_seconds: float = 120) -> None:
        """``kubectl wait ARGUMENTS``, tried again until it succeeds or ``timeout_seconds`` pass.

        kubectl wait gives up at once on an object it cannot find: seen right after a server-side apply of a
        CRD had returned (the benchmark's start failed with exit status 1), so one call is not enough.
        """
        deadline = time.monotonic() + timeout_seconds
        while True:
            left = max(1, round(deadline - time.monotonic()))
            result = self.kubectl("wait", *arguments, f"--timeout={left}s", check=False)
            if result.returncode == 0:
                return
            if time.monotonic() >= deadline:
                raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
            time.sleep(0.2)

    def helm(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the built helm as the admin; output captured as text."""
        if self.binaries.helm is None:
            raise ClusterBinariesMissingError("helm is not built; run scripts/setup/cluster-binaries.sh")
        return subprocess.run(
            [str(self.binaries.helm), f"--kubeconfig={self.kubeconfig}", *arguments],
            capture_output=True,
            text=True,
            check=check,
            timeout=300,
        )

    def stop(self) -> None:
        """Stop every recorded process of this run, newest first, and collect our children."""
        if self.runtime == "containers":
            _stop_kubelet_nodes(self.run_directory, self.layout.pid_directory)
            self._kubelet_nodes.clear()
        processes.stop_all(self.layout.pid_directory, grace_seconds=10)
        for process in self._children:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._children.clear()


def _stop_kubelet_nodes(run_directory: Path, pid_directory: Path) -> None:
    from devtools.cluster.kubelets import stop_nodes

    try:
        binaries: RuntimeBinaries | None = locate_runtime_binaries()
    except ClusterBinariesMissingError:
        binaries = None
    stop_nodes(run_directory, pid_directory, binaries)


class _PortTakenError(Exception):
    """A component could not bind its port because another process took it first."""


def _command_up(arguments: argparse.Namespace) -> int:
    run_directory = Path(arguments.run_dir).resolve()
    if (run_directory / "pids").exists() and any(
        processes.is_alive(record) for record in processes.read_records(run_directory / "pids")
    ):
        print(f"a cluster already runs from {run_directory}; stop it with devtools/cluster/down", file=sys.stderr)
        return 1
    if run_directory.exists():
        shutil.rmtree(run_directory)
    try:
        binaries = locate_binaries()
    except ClusterBinariesMissingError as error:
        print(error, file=sys.stderr)
        return 1
    started = time.monotonic()
    control_plane = ControlPlane(run_directory, binaries, runtime="no-nodes" if arguments.no_nodes else "containers")
    try:
        control_plane.start()
        if arguments.images:
            _load_project_images(control_plane, arguments.cpu_runner)
    except (ClusterError, RuntimeError) as error:
        control_plane.stop()
        print(error, file=sys.stderr)
        return 1
    print(f"control plane up in {time.monotonic() - started:.1f} s at {control_plane.server}", file=sys.stderr)
    print(f"export KUBECONFIG={control_plane.kubeconfig}")
    tool_directories = [str(binaries.kubectl.parent)]
    if binaries.helm is not None:
        tool_directories.append(str(binaries.helm.parent))
    (run_directory / "env").write_text(
        f"export KUBECONFIG={control_plane.kubeconfig}\nexport PATH={':'.join(tool_directories)}:$PATH\n"
    )
    return 0


def _load_project_images(control_plane: ControlPlane, cpu_runner: bool) -> None:
    """Build the project's images (seconds when the tree is unchanged) and put them on the nodes, also under the
    names the chart and the operator use by default: the runner on every node, the operator on the nodes its
    Deployment (no tolerations) can run on, and with ``cpu_runner`` the CPU runner (6.8 GB, streamed) on those
    too, where benchmarks on cpu run."""
    from devtools.cluster import images

    for target in ("runner", "operator"):
        archive = images.built_archive(target)
        names = {images.TAGS[target]: images.default_names(target)}
        control_plane.load_images([archive], names, untainted_only=target == "operator")
    if cpu_runner:
        control_plane.load_saved_image(*images.save_command("runner-cpu"), untainted_only=True)


def _command_down(arguments: argparse.Namespace) -> int:
    run_directory = Path(arguments.run_dir).resolve()
    if (run_directory / "nodes").is_dir() or (run_directory / "pod-network.json").exists():
        _stop_kubelet_nodes(run_directory, run_directory / "pids")
    stopped = processes.stop_all(run_directory / "pids", grace_seconds=10)
    print(f"stopped {len(stopped)} processes of {run_directory}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up", help="start a control plane whose nodes are real kubelets over containerd (fake GPUs on two)"
    )
    up.add_argument("--run-dir", required=True, help="folder for the PKI, data, logs and kubeconfig")
    up.add_argument("--no-nodes", action="store_true", help="no nodes: the API server only, pods stay Pending")
    up.add_argument(
        "--images", action="store_true", help="build the runner and operator images and put them on the nodes"
    )
    up.add_argument(
        "--cpu-runner",
        action="store_true",
        help="with --images, also the CPU runner image (vLLM's CPU build) on the untainted nodes",
    )
    down = commands.add_parser("down", help="stop every process a control plane started")
    down.add_argument("--run-dir", required=True)
    arguments = parser.parse_args(argv)
    if arguments.command == "up" and arguments.images and arguments.no_nodes:
        parser.error("--images puts images on the nodes; --no-nodes starts none")
    if arguments.command == "up" and arguments.cpu_runner and not arguments.images:
        parser.error("--cpu-runner is one of the images --images puts on the nodes")
    if arguments.command == "up":
        return _command_up(arguments)
    return _command_down(arguments)


if __name__ == "__main__":
    sys.exit(main())
