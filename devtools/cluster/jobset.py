"""JobSet's manager (sigs.k8s.io/jobset), built from its Go module by `build`, run as a local process against a
ControlPlane.

A JobSet (jobset.x-k8s.io/v1alpha2) is a group of Jobs run as one: per `replicatedJobs` entry, `replicas` Indexed
Jobs named `<jobset>-<replicatedJob>-<jobIndex>`, whose pods get the hostname `<job>-<podIndex>` (the Job
controller's, for Indexed Jobs) under the subdomain of a headless Service the manager creates (named
`spec.network.subdomain`, or the JobSet's name), so that each pod has the stable name
`<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`; the JobSet's status ends `Completed` or `Failed`
as its success and failure policies say, and deleting it deletes its Jobs, their pods and the Service (owner
references, the garbage collector). JobSet acts as the cluster's admin.

No webhooks are registered with the API server (devtools/cluster/README.md says why), so JobSet's defaulting
webhook never runs, and the manager does not default what it reads: it dereferences `spec.network`,
`spec.successPolicy` and `spec.startupPolicy` (checked: a JobSet without `spec.network` makes its reconciler
panic with a nil pointer dereference, which controller-runtime recovers from and retries, and no Job is made). So
every JobSet created here must be complete, as `jobset()` and `replicated_job()` write them. The webhook would
have set (pkg/webhooks/jobset_webhook.go, `Default`):
- `spec.successPolicy`: `{operator: All}` (every Job of every replicatedJob must succeed);
- `spec.startupPolicy`: `{startupPolicyOrder: AnyOrder}`;
- per replicatedJob, `template.spec.completionMode: Indexed`, and the pods' `restartPolicy: OnFailure` when
  empty (the API server refuses a Job's pod template without one);
- `spec.network.enableDNSHostnames: true` and `spec.network.publishNotReadyAddresses: true`;
- a failure policy rule's empty `name` as `failurePolicyRule<index>`, and a volume claim policy's
  `retentionPolicy` as `{whenDeleted: Delete}`.
The CRD's schema defaults the rest itself (`replicas: 1`, `groupName: default`, `failurePolicy.restartStrategy:
Recreate`). The Job API itself requires `completions` for an Indexed Job; `parallelism` defaults to 1, so a
replicatedJob of N pods at once sets both to N. The webhook's validation (names short enough for DNS labels,
`dependsOn` only on earlier replicatedJobs, success policy targets that exist, `coordinator` naming a pod that
exists) is not run either: a JobSet that breaks it is accepted, and fails later in the manager or the Job API.
Its pod webhook only acts on exclusive placement (`alpha.jobset.sigs.k8s.io/exclusive-topology`), not used here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from devtools.cluster.controlplane import (
    CLUSTER_DIRECTORY,
    ClusterBinariesMissingError,
    ControlPlane,
    cache_directory,
    free_port,
    pinned_version,
)
from devtools.cluster.manager import ManagerProcess, up_command
from devtools.cluster.pki import make_serving_pair

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
# Labels (and annotations) the manager puts on a JobSet's Jobs and their pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# With `spec.coordinator`: the coordinator pod's stable name, `<pod hostname>.<subdomain>`, on every pod.
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"


def jobset_version() -> str:
    """The JobSet release the jobset module pins, e.g. v0.11.0."""
    return pinned_version(CLUSTER_DIRECTORY / "go" / "jobset" / "go.mod", "sigs.k8s.io/jobset")


@dataclass(frozen=True)
class JobSetBinaries:
    """JobSet's manager and the folder of its CRD (the module's config/components/crd/bases)."""

    manager: Path
    crds: Path


def jobset_directory() -> Path:
    """Where `scripts/setup/cluster-binaries.sh` puts JobSet's manager and, in `crds/`, its CRD."""
    return cache_directory() / f"jobset-{jobset_version()}"


def locate_jobset() -> JobSetBinaries:
    """Find the cached JobSet build, or say how to get it."""
    directory = jobset_directory()
    binaries = JobSetBinaries(manager=directory / "jobset", crds=directory / "crds")
    missing = []
    if not os.access(binaries.manager, os.X_OK):
        missing.append(str(binaries.manager))
    if not any(binaries.crds.glob("*.yaml")):
        missing.append(f"JobSet's CRD in {binaries.crds}")
    if missing:
        raise ClusterBinariesMissingError(f"missing {', '.join(missing)}; run scripts/setup/cluster.sh to install them")
    return binaries


def install_jobset_crds(control_plane: ControlPlane, crds: Path) -> None:
    """Apply JobSet's CRD and wait until it is Established. Server-side: at 820 kB (every replicatedJob holds a
    whole Job template) it is far over client-side apply's 256 kB annotation. Kueue's JobSet integration calls it
    too, before Kueue starts."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    control_plane.wait("--for=condition=Established", "-f", str(crds), timeout_seconds=60)


def jobset_configuration(
    *, health_port: int, metrics_port: int, webhook_port: int, certificates: Path
) -> dict[str, Any]:
    """JobSet's Configuration (config.jobset.x-k8s.io/v1alpha1) for a local process on 127.0.0.1."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        # Its certificate management (open-policy-agent's cert-controller) writes the Secret
        # jobset-system/jobset-webhook-server-cert and patches the webhook configurations of an in-cluster
        # install, and the controllers wait for it; a local process gets its certificates as files instead.
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # Served over TLS (authenticated, authorized with TokenReviews and SubjectAccessReviews); with the
        # certificate management off it reads tls.crt/tls.key from certDir (default
        # /tmp/k8s-metrics-server/serving-certs, shared by every run on the machine).
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(certificates)},
        # The webhook server starts (JobSet's /readyz waits for it) but nothing calls it.
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certificates)},
    }


@dataclass
class JobSet(ManagerProcess):
    """JobSet's manager running against one ControlPlane. start() installs its CRD and starts it; stop() stops
    it."""

    name: ClassVar[str] = "jobset"
    title: ClassVar[str] = "JobSet"
    binaries: JobSetBinaries = field(default_factory=locate_jobset)

    def install_crds(self) -> None:
        install_jobset_crds(self.control_plane, self.binaries.crds)

    def start(self, timeout_seconds: float = 120) -> None:
        """Install the CRD and start the manager; return once it is ready."""
        if self.running:
            return
        self.install_crds()
        self.directory.mkdir(parents=True, exist_ok=True)
        certificates = self.directory / "certs"
        make_serving_pair(certificates, "tls", "jobset-webhook")
        self.health_port, self.metrics_port = free_port(), free_port()
        configuration = jobset_configuration(
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            webhook_port=free_port(),
            certificates=certificates,
        )
        configuration_file = self.directory / "configuration.yaml"
        # JSON is YAML, and keeps this module free of a YAML dependency.
        configuration_file.write_text(json.dumps(configuration, indent=2))
        command = [
            str(self.binaries.manager),
            f"--config={configuration_file}",
            f"--kubeconfig={self.control_plane.kubeconfig}",
            # Its default is zap's development mode at debug level: every reconcile's details.
            "--zap-devel=false",
            "--zap-log-level=2",
        ]
        self.launch(command, timeout_seconds)


# Manifests of JobSet's API that tests create: complete, as its defaulting webhook would have left them.


def replicated_job(
    name: str, pod_spec: Mapping[str, Any], *, replicas: int = 1, pods: int = 1, backoff_limit: int = 0
) -> dict[str, Any]:
    """A replicatedJob of `replicas` Indexed Jobs of `pods` pods each, all running at once, from `pod_spec`
    (its `restartPolicy` defaults to Never, a benchmark's; JobSet's webhook would default OnFailure)."""
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "completionMode": "Indexed",
                "completions": pods,
                "parallelism": pods,
                "backoffLimit": backoff_limit,
                "template": {"spec": {"restartPolicy": "Never", **pod_spec}},
            }
        },
    }


def jobset(
    namespace: str,
    name: str,
    replicated_jobs: Sequence[Mapping[str, Any]],
    *,
    labels: Mapping[str, str] | None = None,
    suspend: bool = False,
    coordinator: tuple[str, int, int] | None = None,
) -> dict[str, Any]:
    """A JobSet with every field JobSet's defaulting webhook would set (the module's docstring): it succeeds when
    every Job succeeds, its pods get DNS hostnames under the subdomain `name`. `coordinator` (replicatedJob, job
    index, pod index) names the pod whose stable name every pod gets in the label COORDINATOR_LABEL."""
    spec: dict[str, Any] = {
        "replicatedJobs": list(replicated_jobs),
        "successPolicy": {"operator": "All"},
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": name},
        "suspend": suspend,
    }
    if coordinator is not None:
        replicated, job_index, pod_index = coordinator
        spec["coordinator"] = {"replicatedJob": replicated, "jobIndex": job_index, "podIndex": pod_index}
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


def pod_hostname(jobset_name: str, replicated_job_name: str, job_index: int, pod_index: int) -> str:
    """The hostname of a JobSet's pod: its Job's name `<jobset>-<replicatedJob>-<jobIndex>` and its completion
    index; under the subdomain, `<hostname>.<subdomain>` is its stable name."""
    return f"{jobset_name}-{replicated_job_name}-{job_index}-{pod_index}"


def main(argv: Sequence[str] | None = None) -> int:
    """`up`: start JobSet against a control plane that `devtools/cluster/up` started in RUN_DIR (its `down`
    stops JobSet too)."""

    def start(control_plane: ControlPlane) -> JobSet:
        manager = JobSet(control_plane)
        manager.start()
        return manager

    return up_command(argv, main.__doc__ or "", start, jobset_version())


if __name__ == "__main__":
    sys.exit(main())
