"""Local PersistentVolumes for tests: a folder of this machine (every node's disk) served to one claim, as a
static provisioner would serve a node's disk."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devtools.cluster.controlplane import ControlPlane


def persistent_volume_name(namespace: str, claim: str) -> str:
    """Cluster-wide, so unique per test namespace."""
    return f"{namespace}-{claim}"


def bind_local_volume(
    cluster: ControlPlane, namespace: str, claim: str, folder: Path, nodes: Sequence[str] | None = None
) -> str:
    """A local PersistentVolume on ``folder``, reachable from ``nodes`` (default: all; they share this machine),
    and the claim ``claim`` bound to it (each names the other, and a StorageClass name no other volume has); waits
    until the claim is Bound and returns the volume's name."""
    volume = persistent_volume_name(namespace, claim)
    storage_class = f"batchmark-test-{volume}"  # no StorageClass object: the volume binds only to this claim
    hostnames = list(nodes if nodes is not None else cluster.node_names)
    node_affinity = {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hostnames}]}
            ]
        }
    }
    persistent_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "claimRef": {"namespace": namespace, "name": claim},
            "local": {"path": str(folder)},
            "nodeAffinity": node_affinity,
        },
    }
    claim_object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    cluster.request("POST", "/api/v1/persistentvolumes", persistent_volume)
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim_object)
    cluster.wait("--for=jsonpath={.status.phase}=Bound", f"pvc/{claim}", "-n", namespace, timeout_seconds=60)
    return volume


def release_local_volume(cluster: ControlPlane, namespace: str, claim: str, wait: bool = False) -> None:
    """Delete the claim and its volume (the folder stays: the caller made it). With ``wait``, until both are gone
    (the claim's protection finalizer holds it while a pod still mounts it)."""
    waiting = ["--wait", "--timeout=60s"] if wait else ["--wait=false"]
    cluster.kubectl("delete", "pvc", claim, "-n", namespace, *waiting, check=False)
    cluster.kubectl("delete", "pv", persistent_volume_name(namespace, claim), *waiting, check=False)
