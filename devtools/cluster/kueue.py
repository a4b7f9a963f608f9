"""Kueue's manager, built from its Go module by `build`, run as a local process against a ControlPlane.

It manages `batch/v1` Jobs and JobSets (jobset.x-k8s.io, run by devtools/cluster/jobset.py) that are created
suspended with the `kueue.x-k8s.io/queue-name` label, admits them against ClusterQueue quotas (a JobSet as one
Workload, all its pods or none) and unsuspends them; the nodes' kubelets then run their pods. No webhooks are
registered with the API server (devtools/cluster/README.md says why); its visibility server (queue positions) is
registered as an APIService, served through the API server's aggregation layer. Kueue acts as the cluster's
admin.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from devtools.cluster.controlplane import (
    CLUSTER_DIRECTORY,
    ClusterBinariesMissingError,
    ClusterError,
    ControlPlane,
    cache_directory,
    free_port,
    pinned_version,
)
from devtools.cluster.jobset import install_jobset_crds, jobset_directory
from devtools.cluster.manager import ManagerProcess, up_command
from devtools.cluster.pki import make_serving_pair

KUEUE_NAMESPACE = "kueue-system"
# Kueue reads its metrics server's certificate from this fixed path when its internal certificate management
# is off; no flag moves it. `scripts/setup/cluster.sh` writes a self-signed pair there once (README.md).
METRICS_CERTIFICATE_DIRECTORY = Path("/etc/kueue/metrics/certs")
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's name for its JobSet integration.
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
# Its visibility server reads its certificate from this fixed folder (tls.crt, tls.key) when the internal
# certificate management is off; no flag or setting moves it. `scripts/setup/cluster.sh` writes one there once.
VISIBILITY_CERTIFICATE_DIRECTORY = Path("/visibility")
# The Service the APIServices name, as Kueue's own manifests name it: the API server verifies the visibility
# server's certificate for VISIBILITY_SERVICE.KUEUE_NAMESPACE.svc.
VISIBILITY_SERVICE = "kueue-visibility-server"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
# Kueue v0.17 serves both versions from one storage; v1beta2 is the preferred one.
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")


def kueue_version() -> str:
    """The Kueue release the kueue module pins, e.g. v0.17.0."""
    return pinned_version(CLUSTER_DIRECTORY / "go" / "kueue" / "go.mod", "sigs.k8s.io/kueue")


@dataclass(frozen=True)
class KueueBinaries:
    """Kueue's manager and the folder of its CRDs (the module's config/components/crd/bases), and the folder of
    JobSet's CRD (its JobSet integration watches JobSets)."""

    manager: Path
    crds: Path
    jobset_crds: Path


def locate_kueue() -> KueueBinaries:
    """Find the cached Kueue build, its metrics certificate and JobSet's CRD, or say how to get them."""
    directory = cache_directory() / f"kueue-{kueue_version()}"
    binaries = KueueBinaries(
        manager=directory / "kueue", crds=directory / "crds", jobset_crds=jobset_directory() / "crds"
    )
    missing = []
    if not os.access(binaries.manager, os.X_OK):
        missing.append(str(binaries.manager))
    if not any(binaries.crds.glob("*.yaml")):
        missing.append(f"Kueue's CRDs in {binaries.crds}")
    if not any(binaries.jobset_crds.glob("*.yaml")):
        missing.append(f"JobSet's CRD in {binaries.jobset_crds}")
    for server, directory in (
        ("metrics", METRICS_CERTIFICATE_DIRECTORY),
        ("visibility", VISIBILITY_CERTIFICATE_DIRECTORY),
    ):
        if not all((directory / name).is_file() for name in ("tls.crt", "tls.key")):
            missing.append(f"the certificate Kueue's {server} server reads from {directory}")
    if missing:
        raise ClusterBinariesMissingError(f"missing {', '.join(missing)}; run scripts/setup/cluster.sh to install them")
    return binaries


def kueue_configuration(
    *, health_port: int, metrics_port: int, webhook_port: int, webhook_certificates: Path, visibility_port: int
) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a local process on 127.0.0.1."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        # Only Jobs that ask for a queue: the other tests' Jobs on the same cluster are left alone.
        "manageJobsWithoutQueueName": False,
        # Its certificate management writes Secrets and patches webhook configurations of an in-cluster
        # install; a local process gets its certificates as files instead.
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        # The webhook server starts (its readiness is part of Kueue's /readyz) but nothing calls it.
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(webhook_certificates)},
        # JobSets too: one Workload per JobSet, a PodSet per replicatedJob. Kueue sets its JobSet controller up
        # only once JobSet's API exists, polling with a back-off of up to 2 minutes while it does not, so
        # start() installs JobSet's CRD first.
        "integrations": {"frameworks": ["batch/job", JOBSET_FRAMEWORK]},
        # Queue positions (feature gate VisibilityOnDemand, on by default): an API server of its own that the
        # cluster's API server proxies to (register_visibility_api). Its default is every interface, port 8082.
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        # Fair sharing between the ClusterQueues of a cohort, as teams sharing GPUs want it.
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
    }


@dataclass
class Kueue(ManagerProcess):
    """Kueue running against one ControlPlane. start() installs its CRDs and starts it; stop() stops it."""

    name: ClassVar[str] = "kueue"
    title: ClassVar[str] = "Kueue"
    binaries: KueueBinaries = field(default_factory=locate_kueue)
    visibility_port: int = field(default=0, kw_only=True)

    def install_crds(self) -> None:
        """Apply Kueue's CRDs (server-side: some are too large for client-side apply's annotation), and
        JobSet's, which its JobSet integration needs before it starts (whether or not JobSet's manager runs)."""
        crds = str(self.binaries.crds)
        self.control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", crds)
        self.control_plane.wait("--for=condition=Established", "-f", crds, timeout_seconds=60)
        install_jobset_crds(self.control_plane, self.binaries.jobset_crds)

    def start(self, timeout_seconds: float = 120) -> None:
        """Install the CRDs, create Kueue's namespace and start the manager; return once it is ready."""
        if self.running:
            return
        self.install_crds()
        self.control_plane.kubectl("create", "namespace", KUEUE_NAMESPACE, check=False)
        self.directory.mkdir(parents=True, exist_ok=True)
        webhook_certificates = self.directory / "webhook-certs"
        make_serving_pair(webhook_certificates, "tls", "kueue-webhook")
        self.health_port, self.metrics_port, self.visibility_port = free_port(), free_port(), free_port()
        configuration = kueue_configuration(
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            webhook_port=free_port(),
            webhook_certificates=webhook_certificates,
            visibility_port=self.visibility_port,
        )
        configuration_file = self.directory / "configuration.yaml"
        # JSON is YAML, and keeps this module free of a YAML dependency.
        configuration_file.write_text(json.dumps(configuration, indent=2))
        command = [
            str(self.binaries.manager),
            f"--config={configuration_file}",
            f"--kubeconfig={self.control_plane.kubeconfig}",
            # The configuration's bindPort counts only when it differs from the default 8082, the flag's
            # otherwise: both say the same.
            f"--visibility-server-port={self.visibility_port}",
            "--zap-log-level=2",
        ]
        deadline = self.launch(command, timeout_seconds)
        try:
            self.register_visibility_api(deadline)
        except ClusterError:
            self.stop()
            raise

    def register_visibility_api(self, deadline: float) -> None:
        """Register the visibility server with the API server's aggregation layer, and wait until the API server
        reports it available (it reached the server, under a certificate it trusts, and read its discovery).

        The APIService names a Service; the API server's default resolver (k8s.io/apiserver/pkg/util/proxy
        ResolveCluster) sends a Service of type ExternalName to `externalName:port`, the port being the
        APIService's. That is how a server on 127.0.0.1 is reached: Endpoints and EndpointSlices may not hold
        loopback addresses, and the ClusterIP a ClusterIP Service gets routes nowhere without kube-proxy.
        """
        manifests = visibility_api_manifests(self.visibility_port, VISIBILITY_CERTIFICATE_DIRECTORY / "tls.crt")
        manifest_file = self.directory / "visibility-api.json"
        # JSON is YAML; server-side apply, so that a later start's port replaces an earlier one's.
        manifest_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2))
        self.control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest_file))
        for version in VISIBILITY_VERSIONS:
            while True:
                found = self.control_plane.kubectl(
                    "get", "apiservice", f"{version}.{VISIBILITY_GROUP}", "-o", "json", check=False
                )
                conditions: list[dict[str, Any]] = (
                    (json.loads(found.stdout).get("status") or {}).get("conditions") or []
                    if found.returncode == 0
                    else []
                )
                available = next((entry for entry in conditions if entry.get("type") == "Available"), {})
                if available.get("status") == "True":
                    break
                self.check_alive()
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"APIService {version}.{VISIBILITY_GROUP} not available: {available.get('reason')}:"
                        f" {available.get('message')}; Kueue's log is {self.log_file}"
                    )
                time.sleep(0.2)

    def unregister_visibility_api(self) -> None:
        """Remove the APIServices: one whose server is gone makes discovery of the whole API report an error,
        and namespace deletion waits for it."""
        names = [f"apiservice/{version}.{VISIBILITY_GROUP}" for version in VISIBILITY_VERSIONS]
        # Not checked: the control plane may be gone already, and then so are they.
        self.control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", *names, check=False)

    def stop(self) -> None:
        """Stop the manager and unregister its visibility API (its CRDs and objects stay, as after uninstalling
        Kueue's Deployment)."""
        if self._record is not None:
            self.unregister_visibility_api()
        super().stop()


def visibility_api_manifests(port: int, certificate: Path) -> list[dict[str, Any]]:
    """The ExternalName Service that routes to the visibility server on localhost:`port`, and one APIService
    per version it serves, trusting its self-signed certificate."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": VISIBILITY_SERVICE, "namespace": KUEUE_NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    ca_bundle = base64.b64encode(certificate.read_bytes()).decode("ascii")
    api_services: list[dict[str, Any]] = [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{VISIBILITY_GROUP}"},
            "spec": {
                "group": VISIBILITY_GROUP,
                "version": version,
                "service": {"name": VISIBILITY_SERVICE, "namespace": KUEUE_NAMESPACE, "port": port},
                "caBundle": ca_bundle,
                # Kueue's own manifests' priorities.
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
        for version in VISIBILITY_VERSIONS
    ]
    return [service, *api_services]


# Manifests of Kueue's API (kueue.x-k8s.io/v1beta2) that tests and benchmarks create.
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU_RESOURCE = "nvidia.com/gpu"


def resource_flavor(name: str) -> dict[str, Any]:
    """A ResourceFlavor for the fake GPU nodes (selected by the label GPU feature discovery sets)."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true"}},
    }


def cluster_queue(
    name: str,
    flavor: str,
    gpus: int,
    *,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    preemption: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with `gpus` GPUs of quota in `flavor`, open to every namespace. It covers CPU and memory
    too, with more quota than the nodes hold (GPUs are what it rations): Kueue admits no Workload that
    requests a resource its ClusterQueue does not cover, and every benchmark pod requests CPU and memory."""
    quota: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": gpus}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    plenty = [{"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "8Ti"}]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                "flavors": [{"name": flavor, "resources": [*plenty, quota]}],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if preemption is not None:
        spec["preemption"] = preemption
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    """A LocalQueue: the name a namespace's Jobs ask for, pointing at a ClusterQueue."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    """A WorkloadPriorityClass: a priority for Kueue's queueing and preemption only, not for the pods."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": f"batchmark test priority {value}",
    }


def main(argv: Sequence[str] | None = None) -> int:
    """`up`: start Kueue against a control plane that `devtools/cluster/up` started in RUN_DIR (its `down`
    stops Kueue too)."""

    def start(control_plane: ControlPlane) -> Kueue:
        manager = Kueue(control_plane)
        manager.start()
        return manager

    return up_command(argv, main.__doc__ or "", start, kueue_version())


if __name__ == "__main__":
    sys.exit(main())
