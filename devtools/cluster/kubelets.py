"""The `containers` runtime of the local cluster: each node is a real kubelet over a containerd of its own.

Pods then run as a user's cluster runs them: in containers of their images (imported from podman's store, as
no registry is reachable), with their own network namespace and address, their securityContext, volumes and
limits applied by the kubelet, containerd and runc. What differs from a real cluster, and why each piece is
set as it is, is in README.md ("The containers runtime").

Per cluster, one pod network (`PodNetwork`): a Linux bridge `bmk<N>` with the pods' subnet 10.214.N.0/24, and
the first address of the cluster's Service range 10.213.N.0/24, which is the `kubernetes` Service's and so
what pods are told the API server is, on that bridge with a DNAT rule to the API server's port. Per node
(`KubeletNode`): a containerd (its own root, state, socket and runc root), the CNI configuration for its part
of the subnet, and a kubelet (its own root, cgroup root, pod log folder and ports). Kubelets never share a
containerd: a kubelet kills every pod of its runtime that is not bound to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.cluster import processes
from devtools.cluster.ociarchive import write_image_archive

# The image containerd runs as each pod's sandbox (its network namespace holder); made locally from the
# pause program built from the Kubernetes module, under the name containerd 2.4 pins by default.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
POD_SUBNET_PREFIX = "10.214"
SERVICE_SUBNET_PREFIX = "10.213"
BRIDGE_PREFIX = "bmk"
# Which bridge numbers are taken, and by which run (so a crashed run's bridge can be taken back).
NETWORK_RECORDS = Path("/run/batchmark/pod-networks")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "batchmark"
# Addresses per node in the cluster's /24; node i gets NODE_RANGE_START + i * NODE_RANGE_SIZE onwards.
NODE_RANGE_START = 10
NODE_RANGE_SIZE = 40
CONTAINERD_NAMESPACE = "k8s.io"  # the one containerd's CRI plugin uses
# An imported archive's layers are kept once, unpacked (the image's files), not also as the archive's layer blobs:
# each copy is as large as the image (a GB for the runner's, 7 GB for the CPU runner's, on every node that holds
# it), and with both a run filled CI's disk. (The discard works in ctr's local import only.)
DISCARD_ARCHIVE_LAYERS = ("--local", "--discard-unpacked-layers")
# Where `podman save` writes each layer before the archive (it needs the layer's size first): podman's own default
# for big files (not /tmp, often in memory), in a folder of the saving process's, so that a save killed midway
# (its 6.6 GB copy of the CPU runner's vLLM layer stayed in /var/tmp) is removed by the next one.
SAVE_SCRATCH = Path("/var/tmp")
SAVE_SCRATCH_PREFIX = "batchmark-save-"
CLUSTER_DOMAIN = "cluster.local"


class ContainersRuntimeError(RuntimeError):
    """The containers runtime could not be started or cleaned up; the message says why."""


@dataclass(frozen=True)
class RuntimeBinaries:
    """The programs of the containers runtime: built ones (scripts/setup/cluster-binaries.sh) and Debian's runc
    and iptables."""

    kubelet: Path
    pause: Path
    containerd_directory: Path  # containerd, containerd-shim-runc-v2, ctr
    crictl: Path
    cni_directory: Path  # bridge, host-local, loopback, portmap
    runc: Path
    iptables: Path

    @property
    def containerd(self) -> Path:
        return self.containerd_directory / "containerd"

    @property
    def ctr(self) -> Path:
        return self.containerd_directory / "ctr"

    def missing(self) -> list[str]:
        wanted = [
            self.kubelet,
            self.pause,
            self.containerd,
            self.containerd_directory / "containerd-shim-runc-v2",
            self.ctr,
            self.crictl,
            *(self.cni_directory / name for name in ("bridge", "host-local", "loopback", "portmap")),
            self.runc,
            self.iptables,
        ]
        return [str(path) for path in wanted if not os.access(path, os.X_OK)]


def _run(command: Sequence[str | Path], check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise ContainersRuntimeError(
            f"{' '.join(map(str, command))} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


@dataclass(frozen=True)
class PodNetwork:
    """One cluster's pod network: a bridge on this machine, the pods' subnet and the Service range."""

    number: int

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.number}"

    @property
    def gateway(self) -> str:
        """The host's address on the bridge: the pods' default route, and every node's address."""
        return f"{POD_SUBNET_PREFIX}.{self.number}.1"

    @property
    def subnet(self) -> str:
        return f"{POD_SUBNET_PREFIX}.{self.number}.0/24"

    @property
    def service_range(self) -> str:
        return f"{SERVICE_SUBNET_PREFIX}.{self.number}.0/24"

    @property
    def api_address(self) -> str:
        """The `kubernetes` Service's address (the range's first): pods reach the API server there, port 443."""
        return f"{SERVICE_SUBNET_PREFIX}.{self.number}.1"

    def node_range(self, index: int) -> tuple[str, str]:
        first = NODE_RANGE_START + index * NODE_RANGE_SIZE
        if first + NODE_RANGE_SIZE > 255:
            raise ContainersRuntimeError(f"no addresses left for a node number {index}")
        return (
            f"{POD_SUBNET_PREFIX}.{self.number}.{first}",
            f"{POD_SUBNET_PREFIX}.{self.number}.{first + NODE_RANGE_SIZE - 1}",
        )

    def _dnat_rule(self, apiserver_port: int) -> list[str]:
        return [
            "PREROUTING",
            "-d",
            f"{self.api_address}/32",
            "-p",
            "tcp",
            "--dport",
            "443",
            "-m",
            "comment",
            "--comment",
            f"batchmark {self.bridge}: the kubernetes Service",
            "-j",
            "DNAT",
            "--to-destination",
            f"127.0.0.1:{apiserver_port}",
        ]

    def _isolation_rule(self) -> list[str]:
        return [
            "FORWARD",
            "-i",
            self.bridge,
            "!",
            "-o",
            self.bridge,
            "-m",
            "comment",
            "--comment",
            f"batchmark {self.bridge}: nothing from pods leaves this machine",
            "-j",
            "DROP",
        ]

    def route_api_server(self, iptables: Path, apiserver_port: int) -> None:
        """Send what pods address to the `kubernetes` Service (port 443) to the API server on 127.0.0.1, and drop
        whatever pods send to be forwarded elsewhere (the CNI bridge plugin turns IP forwarding on)."""
        _run([iptables, "-t", "nat", "-A", *self._dnat_rule(apiserver_port)])
        _run([iptables, "-I", *self._isolation_rule()])
        record = self._record_path()
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "apiserver_port": apiserver_port}))

    def _record_path(self) -> Path:
        return NETWORK_RECORDS / f"{self.bridge}.json"

    def release(self, iptables: Path) -> None:
        """Remove the DNAT rule, the bridge and the record (what is already gone is skipped)."""
        record = self._record_path()
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            port = json.loads(record.read_text()).get("apiserver_port")
            if port is not None:
                _run([iptables, "-t", "nat", "-D", *self._dnat_rule(port)], check=False)
                _run([iptables, "-D", *self._isolation_rule()], check=False)
        _run(["ip", "link", "delete", self.bridge, "type", "bridge"], check=False)
        record.unlink(missing_ok=True)


def start_cluster_dns(
    network: PodNetwork,
    log_directory: Path,
    pid_directory: Path,
    *,
    server: str,
    certificate_authority: Path,
    client_certificate: Path,
    client_key: Path,
) -> None:
    """The cluster DNS on the bridge's gateway address: the `kubernetes` Service's names from the start, and the
    names of every Service and headless Service's endpoints (pods' hostnames) it watches through the API server
    at `server`, as the client of `client_certificate`."""
    names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{CLUSTER_DOMAIN}"]
    command = [sys.executable, "-m", "devtools.cluster.clusterdns", "--address", network.gateway]
    for name in names:
        command += ["--record", f"{name}={network.api_address}"]
    command += [
        f"--cluster-domain={CLUSTER_DOMAIN}",
        f"--server={server}",
        f"--certificate-authority={certificate_authority}",
        f"--client-certificate={client_certificate}",
        f"--client-key={client_key}",
    ]
    processes.start_detached(
        "cluster-dns",
        command,
        log_directory / "cluster-dns.log",
        pid_directory,
        working_directory=Path(__file__).resolve().parents[2],
    )


def _bridge_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _run_is_gone(claim: dict[str, Any]) -> bool:
    """Whether the run that claimed a network number has ended: neither the process that claimed it (which
    has started none of the run's processes yet while it makes the cluster's certificates) nor any process of
    the run is alive."""
    claimant = claim.get("claimant")
    if claimant is not None and processes.is_alive(processes.ProcessRecord("claimant", *claimant)):
        return False
    pid_directory = Path(claim["run_directory"]) / "pids"
    return not any(processes.is_alive(record) for record in processes.read_records(pid_directory))


# Where containerd's CNI code, and podman's, bind-mount each pod's (container's) network namespace. Each makes the
# folder a shared mount point of its own the first time it finds it is none, by bind-mounting it onto itself
# recursively. Done while the other's namespaces are mounted there (on a freshly booted machine: a podman build
# while a cluster's pods run), that copies them into the new mount and hides the originals, which can then never
# be unmounted through their path: containerd cannot remove the pod's sandbox ("failed to remove netns: unlinkat
# /run/netns/cni-...: device or resource busy") and the pod stays Terminating for ever.
NETNS_DIRECTORY = Path("/run/netns")


def share_network_namespaces() -> None:
    """Make NETNS_DIRECTORY a shared mount point before any node starts (once per boot; then neither containerd nor
    podman remounts it)."""
    NETNS_DIRECTORY.mkdir(parents=True, exist_ok=True)
    mount_points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    if str(NETNS_DIRECTORY) not in mount_points:
        _run(["mount", "--bind", str(NETNS_DIRECTORY), str(NETNS_DIRECTORY)])
    _run(["mount", "--make-shared", str(NETNS_DIRECTORY)])


def allocate_pod_network(run_directory: Path, iptables: Path) -> PodNetwork:
    """Create the bridge of the first free network number, taking back those of runs that are gone (and, first,
    make the network namespaces' folder a shared mount point: ``share_network_namespaces``)."""
    share_network_namespaces()
    NETWORK_RECORDS.mkdir(parents=True, exist_ok=True)
    for number in range(256):
        network = PodNetwork(number)
        record = network._record_path()
        if _bridge_exists(network.bridge) or record.exists():
            try:
                claim = json.loads(record.read_text())
                if not _run_is_gone(claim):
                    continue
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                continue  # not ours, or being written
            network.release(iptables)
        try:
            # O_EXCL: of two runs looking at one free number, one gets it.
            with record.open("x") as claim_file:
                claimant = processes.record_for(os.getpid(), "claimant")
                claim_file.write(
                    json.dumps(
                        {
                            "run_directory": str(run_directory),
                            "claimant": None if claimant is None else [claimant.pid, claimant.start_ticks],
                        }
                    )
                )
        except FileExistsError:
            continue
        created = _run(["ip", "link", "add", "name", network.bridge, "type", "bridge"], check=False)
        if created.returncode != 0:
            record.unlink(missing_ok=True)
            continue
        _run(["ip", "address", "add", f"{network.gateway}/24", "dev", network.bridge])
        _run(["ip", "address", "add", f"{network.api_address}/32", "dev", network.bridge])
        _run(["ip", "link", "set", network.bridge, "up"])
        # The API server listens on 127.0.0.1 only; the DNAT rule sends the pods' packets there, which the kernel
        # accepts from this bridge only with route_localnet (as kube-proxy does for node ports on localhost).
        Path(f"/proc/sys/net/ipv4/conf/{network.bridge}/route_localnet").write_text("1\n")
        (run_directory / "pod-network.json").write_text(json.dumps({"number": number}))
        return network
    raise ContainersRuntimeError("no free pod network number (bridges bmk0..bmk255 are all taken)")


def recorded_pod_network(run_directory: Path) -> PodNetwork | None:
    try:
        return PodNetwork(json.loads((run_directory / "pod-network.json").read_text())["number"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, the named systemd one and the unified v2 one)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def _make_cgroup(relative: str) -> None:
    """The cgroup in every hierarchy; cpuset's need their CPUs and memory nodes before a process can join."""
    for hierarchy in _cgroup_hierarchies():
        path = hierarchy
        for part in relative.strip("/").split("/"):
            parent, path = path, path / part
            path.mkdir(exist_ok=True)
            for setting in ("cpuset.cpus", "cpuset.mems"):
                own = path / setting
                if own.exists() and not own.read_text().strip():
                    own.write_text((parent / setting).read_text())


def _move_to_cgroup(pid: int, relative: str) -> None:
    for hierarchy in _cgroup_hierarchies():
        with contextlib.suppress(OSError):
            (hierarchy / relative.strip("/") / "cgroup.procs").write_text(str(pid))


def _cgroup_processes(relative: str) -> set[int]:
    found: set[int] = set()
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / relative.strip("/")
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    found.update(int(pid) for pid in procs.read_text().split())
    return found


def _remove_cgroup(relative: str) -> None:
    """Remove the cgroup and every one below it, deepest first (only empty cgroups can be removed)."""
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / relative.strip("/")
        if not top.is_dir():
            continue
        folders = sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda path: -len(path.parts))
        for folder in [*folders, top]:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _unmount_below(directory: Path) -> None:
    """Lazily unmount whatever is mounted under the folder (volumes, overlay roots, sandbox /dev/shm)."""
    prefix = str(directory.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point.startswith(prefix):
            mounts.append(mount_point)
    for mount_point in sorted(mounts, key=len, reverse=True):
        _run(["umount", "-l", mount_point], check=False)


# Unix socket paths are limited to 108 bytes, and containerd and the kubelet put their sockets several folders
# deep below a node's folder: a node's folder lives here, under a short name, whatever the run's folder is.
NODES_ROOT = Path("/var/lib/batchmark-nodes")


def node_directory(run_directory: Path, network: PodNetwork, name: str) -> Path:
    """The node's folder: NODES_ROOT/<bridge>-<name> (the bridge is the live cluster's own), reached from the
    run's folder as nodes/<name> (a link). What an earlier cluster that crashed left there is removed first."""
    directory = NODES_ROOT / f"{network.bridge}-{name}"
    if directory.exists():
        _unmount_below(directory)
        shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    link = run_directory / "nodes" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(directory, target_is_directory=True)
    return directory


@dataclass
class KubeletNode:
    """One node: its containerd and its kubelet, every file of them under `directory`."""

    name: str
    index: int
    directory: Path
    network: PodNetwork
    binaries: RuntimeBinaries
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    kubelet_port: int = 0
    healthz_port: int = 0

    @property
    def socket(self) -> Path:
        return self.directory / "run" / "containerd.sock"

    @property
    def cgroup(self) -> str:
        """The node's cgroup: its containerd, the shims and (below `kubepods`) every container of its pods."""
        return f"{CGROUP_PARENT}/{self.network.bridge}/{self.name}"

    def _write_containerd_config(self) -> Path:
        root, state = self.directory / "containerd", self.directory / "run" / "containerd"
        runc_root = self.directory / "run" / "runc"
        config = f"""version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{self.socket}"
[plugins]
  # NRI's socket is one fixed path per machine; two containerds would fight over it.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{PAUSE_IMAGE}'
  [plugins.'io.containerd.cri.v1.runtime']
    # This machine denies CAP_SYS_RESOURCE even to root, so a negative oom_score_adj (a sandbox's -998) fails:
    # scores are kept at or above containerd's own, as for rootless containerd.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{self.binaries.runc}'
          Root = '{runc_root}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{self.binaries.cni_directory}']
      conf_dir = '{self.directory / "cni"}'
"""
        path = self.directory / "containerd.toml"
        path.write_text(config)
        return path

    def _write_cni_config(self) -> None:
        first, last = self.network.node_range(self.index)
        config = {
            "cniVersion": "1.0.0",
            "name": self.network.bridge,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.network.bridge,
                    "isGateway": True,
                    # Nothing leaves this machine: no masquerading, and a FORWARD rule drops what pods send
                    # elsewhere (route_api_server).
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.directory / "ipam"),
                        "ranges": [
                            [
                                {
                                    "subnet": self.network.subnet,
                                    "gateway": self.network.gateway,
                                    "rangeStart": first,
                                    "rangeEnd": last,
                                }
                            ]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (self.directory / "cni").mkdir(parents=True, exist_ok=True)
        (self.directory / "cni" / "10-bridge.conflist").write_text(json.dumps(config, indent=2))

    def _write_kubelet_config(self, serving_certificate: Path, serving_key: Path) -> Path:
        endpoint = f"unix://{self.socket}"
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1 (with a v2 unified hierarchy beside it); kubelet 1.35+ refuses
            # cgroup v1 unless told not to.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "address": self.network.gateway,
            "port": self.kubelet_port,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "readOnlyPort": 0,
            # The API server reaches the kubelet (logs, exec) with no client certificate; nothing else can
            # reach this machine.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(serving_certificate),
            "tlsPrivateKeyFile": str(serving_key),
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            # One folder per kubelet: a kubelet removes the log folders of pods its runtime does not know.
            "podLogsDir": str(self.directory / "pod-logs"),
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "resolvConf": "/etc/resolv.conf",
            # The cluster DNS (clusterdns.py) on the host's bridge address: Services' and pods' names.
            "clusterDNS": [self.network.gateway],
            "clusterDomain": CLUSTER_DOMAIN,
            # The nodes share one disk with everything else on this machine: evict only when it is truly full,
            # and never collect images, which no registry could bring back.
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "registerWithTaints": [dict(taint) for taint in self.taints],
            "serializeImagePulls": False,
        }
        path = self.directory / "kubelet.yaml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return path

    def start_containerd(self, log_directory: Path, pid_directory: Path, timeout_seconds: float = 60) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        _make_cgroup(self.cgroup)
        _make_cgroup(f"{self.cgroup}/runtime")
        config = self._write_containerd_config()
        self._write_cni_config()
        environment = {**os.environ, "PATH": f"{self.binaries.containerd_directory}:{os.environ.get('PATH', '')}"}
        process, _ = processes.start_detached(
            f"containerd-{self.name}",
            [str(self.binaries.containerd), "--config", str(config)],
            log_directory / f"containerd-{self.name}.log",
            pid_directory,
            environment=environment,
        )
        # Before it starts any shim, so the shims and the containers they start stay within the node's cgroup.
        _move_to_cgroup(process.pid, f"{self.cgroup}/runtime")
        deadline = time.monotonic() + timeout_seconds
        while _run([self.binaries.ctr, "--address", self.socket, "version"], check=False).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (log_directory / f"containerd-{self.name}.log").read_text(errors="replace")[-3000:]
                raise ContainersRuntimeError(f"containerd of {self.name} did not start:\n{log}")
            time.sleep(0.2)
        pause_archive = self.directory / "pause.tar"
        write_image_archive(
            pause_archive, PAUSE_IMAGE, {"/pause": (self.binaries.pause, 0o755)}, ["/pause"], "65535:65535"
        )
        self.import_images([pause_archive])
        pause_archive.unlink()

    def import_images(self, archives: Iterable[Path], names: Mapping[str, Sequence[str]] | None = None) -> None:
        """Import image archives (`podman save` or OCI); `names` adds more names to an imported image."""
        for archive in archives:
            _run([*self._ctr(), "images", "import", *DISCARD_ARCHIVE_LAYERS, archive], timeout=600)
        self._name(names or {})

    def import_saved(self, save: Sequence[str], names: Mapping[str, Sequence[str]]) -> None:
        """Import the archive that the command `save` writes to its standard output, without a copy on disk."""
        _remove_dead_scratch()
        with (
            tempfile.TemporaryDirectory(prefix=_scratch_prefix(), dir=SAVE_SCRATCH) as scratch,
            tempfile.TemporaryFile() as save_errors,
            subprocess.Popen(
                list(save), stdout=subprocess.PIPE, stderr=save_errors, env={**os.environ, "TMPDIR": scratch}
            ) as saving,
        ):
            imported = subprocess.run(
                [*map(str, self._ctr()), "images", "import", *DISCARD_ARCHIVE_LAYERS, "-"],
                stdin=saving.stdout,
                capture_output=True,
                text=True,
                timeout=1200,
                check=False,
            )
            assert saving.stdout is not None
            saving.stdout.close()  # podman then ends on a broken pipe, not blocked, when ctr stopped reading
            saving.wait(timeout=60)
            save_errors.seek(0)
            saved_error = save_errors.read().decode(errors="replace")
        if saving.returncode != 0 or imported.returncode != 0:
            raise ContainersRuntimeError(
                f"{' '.join(save)} | ctr images import failed ({saving.returncode}, {imported.returncode}):"
                f" {saved_error.strip()} {imported.stderr.strip()}"
            )
        self._name(names)

    def _ctr(self) -> list[str | Path]:
        return [self.binaries.ctr, "--address", self.socket, "--namespace", CONTAINERD_NAMESPACE]

    def _name(self, names: Mapping[str, Sequence[str]]) -> None:
        ctr = self._ctr()
        for image, extra_names in names.items():
            for extra in extra_names:
                _run([*ctr, "images", "tag", "--force", image, extra])
                # Also by digest (`repository@sha256:...`), as a pull records it: a manifest that pins the
                # image by digest then finds it on the node.
                repository = extra.rsplit(":", 1)[0] if "@" not in extra else None
                if repository is not None:
                    _run([*ctr, "images", "tag", "--force", image, f"{repository}@{self._image_digest(image)}"])

    def _image_digest(self, name: str) -> str:
        """The digest of the manifest (or index) an image name points at on this node."""
        listed = _run(
            [self.binaries.ctr, "--address", self.socket, "--namespace", CONTAINERD_NAMESPACE, "images", "ls"]
        )
        for line in listed.stdout.splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == name:
                return next(field for field in fields if field.startswith("sha256:"))
        raise ContainersRuntimeError(f"no image {name} on node {self.name}")

    def start_kubelet(
        self,
        kubelet_binary_kubeconfig: Path,
        serving_certificate: Path,
        serving_key: Path,
        log_directory: Path,
        pid_directory: Path,
    ) -> None:
        config = self._write_kubelet_config(serving_certificate, serving_key)
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.labels.items()))
        command = [
            str(self.binaries.kubelet),
            f"--config={config}",
            f"--kubeconfig={kubelet_binary_kubeconfig}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.network.gateway}",
            f"--root-dir={self.directory / 'kubelet'}",
            f"--cert-dir={self.directory / 'kubelet' / 'pki'}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        ]
        processes.start_detached(
            f"kubelet-{self.name}", command, log_directory / f"kubelet-{self.name}.log", pid_directory
        )

    def write_record(self) -> None:
        """What stop_nodes needs to clean the node up, also from another process (devtools/cluster/down)."""
        record = {"name": self.name, "cgroup": self.cgroup, "socket": str(self.socket)}
        (self.directory / "node.json").write_text(json.dumps(record))


def stop_nodes(run_directory: Path, pid_directory: Path, binaries: RuntimeBinaries | None) -> None:
    """Stop the kubelets, then per node remove every pod sandbox through its containerd (which tears their
    networks down), kill whatever is left in the node's cgroup (containerd, shims, containers), unmount what
    is mounted below its folder and free the disk its images and containers took (the logs stay); then
    remove the pod network. Safe to call again, and after a crash."""
    for record in processes.read_records(pid_directory):
        if record.name.startswith("kubelet-"):
            processes.stop(record, grace_seconds=10)
            processes.forget(pid_directory, record)
    for node_record in sorted(run_directory.glob("nodes/*/node.json")):
        try:
            node = json.loads(node_record.read_text())
        except json.JSONDecodeError:
            continue
        socket = Path(node["socket"])
        if binaries is not None and socket.exists():
            crictl: list[str | Path] = [binaries.crictl, "--runtime-endpoint", f"unix://{socket}", "--timeout", "20s"]
            _run([*crictl, "rmp", "--all", "--force"], check=False, timeout=120)
        _clean_up_node(node_record.parent.resolve(), node["cgroup"])
        if node_record.parent.is_symlink():  # a folder under NODES_ROOT: nothing in it outlives the node
            shutil.rmtree(node_record.parent.resolve(), ignore_errors=True)
            node_record.parent.unlink()
    network = recorded_pod_network(run_directory)
    if network is not None:
        _remove_cgroup(f"{CGROUP_PARENT}/{network.bridge}")
        network.release(binaries.iptables if binaries is not None else Path(shutil.which("iptables") or "iptables"))
        (run_directory / "pod-network.json").unlink(missing_ok=True)


def _clean_up_node(directory: Path, cgroup: str) -> None:
    for _ in range(50):
        left = _cgroup_processes(cgroup)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    _unmount_below(directory)
    _remove_cgroup(cgroup)
    for state in ("containerd", "run", "kubelet", "ipam"):
        shutil.rmtree(directory / state, ignore_errors=True)


def _scratch_prefix() -> str:
    """This process's scratch folders' prefix: its PID and start time, which no later process shares."""
    record = processes.record_for(os.getpid(), "save")
    return f"{SAVE_SCRATCH_PREFIX}{os.getpid()}-{record.start_ticks if record is not None else 0}-"


def _remove_dead_scratch() -> None:
    """The scratch folders of saves whose process is gone (killed midway: nothing else removes them)."""
    for folder in SAVE_SCRATCH.glob(f"{SAVE_SCRATCH_PREFIX}*"):
        pid, ticks, *_ = [*folder.name.removeprefix(SAVE_SCRATCH_PREFIX).split("-"), "", ""]
        if pid.isdigit() and ticks.isdigit():
            owner = processes.ProcessRecord(name="save", pid=int(pid), start_ticks=int(ticks))
            if not processes.is_alive(owner):
                shutil.rmtree(folder, ignore_errors=True)
