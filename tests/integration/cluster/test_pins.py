"""The tools modules pin one Kubernetes release consistently (no cluster needed)."""

from __future__ import annotations

import re

from devtools.cluster.controlplane import CLUSTER_DIRECTORY, kubernetes_version


def test_every_staging_module_is_pinned_to_the_release_of_kubernetes() -> None:
    go_mod = (CLUSTER_DIRECTORY / "go" / "kube" / "go.mod").read_text()
    release = kubernetes_version()
    major_minor_patch = re.fullmatch(r"v1\.(\d+)\.(\d+)", release)
    assert major_minor_patch is not None, f"{release} is not a release version"
    staging_version = f"v0.{major_minor_patch.group(1)}.{major_minor_patch.group(2)}"

    replacements = dict(re.findall(r"^\s*(k8s\.io/\S+) => \1 (\S+)$", go_mod, re.MULTILINE))
    assert {"k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go", "k8s.io/kubectl"} <= replacements.keys()
    assert dict.fromkeys(replacements, staging_version) == replacements
    # k8s.io/kubernetes requires its staging modules as v0.0.0; each needs a replace line, or the build fails.
    required_as_placeholders = set(re.findall(r"^\s*(k8s\.io/\S+) v0\.0\.0(?:\s|$)", go_mod, re.MULTILINE))
    assert required_as_placeholders <= replacements.keys()
