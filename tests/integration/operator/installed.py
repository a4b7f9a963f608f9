"""The operator as it ships, for the cluster tests: the Dockerfile's operator image, installed by `helm install` of
the chart with its ServiceAccount, RBAC and admission policies, as a Deployment's pod on a real kubelet.

Every behaviour a cluster test checks then runs under the privileges the chart grants, in the image users pull.
The CRD is applied from crds/ before the install (`crd.install=false`), as a GitOps tool applies it: the CRD's
own tests use it without an operator, and helm adopts no object it did not create.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster.controlplane import write_kubeconfig
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.containers import container_process
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "batchmark"
RELEASE = "batchmark"
# Its own namespace: the chart's admission policy keeps the operator's Jobs out of it, so benchmarks go elsewhere.
RELEASE_NAMESPACE = "batchmark-system"
COMPONENT = "app.kubernetes.io/component=operator"
# How long the chart's liveness probe gives /healthz: an answer within it is a live operator's.
LIVENESS_TIMEOUT_SECONDS = float(
    yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["operator"]["livenessProbe"]["timeoutSeconds"]
)
# What every install of the tests sets: the CRD is applied beforehand (see above).
SESSION_VALUES: dict[str, Any] = {"crd": {"install": False}}


@dataclass(frozen=True)
class LogMark:
    """Where an operator's log stood: its pod and the log's length then."""

    pod: str
    length: int


@dataclass(frozen=True)
class ChartRbac:
    """Who the chart's RBAC and admission policies (templates/rbac.yaml, admission.yaml, serviceaccount.yaml)
    name, as a release installed them."""

    namespace: str  # the release's, the operator's ServiceAccount's
    service_account: str
    policy_prefix: str  # the policies are <prefix>-operator-writes and <prefix>-runner-writes

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@dataclass
class InstalledOperator:
    """A release of the chart on ``cluster``: its operator Deployment's one pod, watching every namespace."""

    cluster: KubeCluster
    directory: Path  # the values files helm is given
    release: str = RELEASE
    namespace: str = RELEASE_NAMESPACE
    layers: tuple[dict[str, Any], ...] = ()  # the values files in force after SESSION_VALUES, helm merges them
    metrics_port: int = 8080  # the chart's operator.metrics.port
    health_port: int = 8081  # the chart's operator.health.port
    _restarts: int = 0  # the container restarts that kill() caused, or that were there before install()

    @property
    def deployment(self) -> str:
        return f"deployment/{self.release}-operator"

    def install(self, *layers: dict[str, Any]) -> None:
        """`helm upgrade --install` with SESSION_VALUES and ``layers`` as values files, each over the one before
        (helm merges them; none: the chart's defaults for the rest), then the operator's pod, a new one where its
        template changed, answering /healthz.

        helm's own --wait is not used: it waits for the pod's readiness probe, which comes every 10 s."""
        self.layers = layers
        self.directory.mkdir(parents=True, exist_ok=True)
        files: list[str] = []
        for index, values in enumerate((SESSION_VALUES, *layers)):
            path = self.directory / f"values-{index}.yaml"
            path.write_text(yaml.safe_dump(values), encoding="utf-8")
            files += ["--values", str(path)]
        generation, old_pods = self.generation(), {pod["metadata"]["name"] for pod in self.pods()}
        installed = self.cluster.helm(
            "upgrade", "--install", self.release, str(CHART), "--namespace", self.namespace, "--create-namespace",
            "--reset-values", *files,
            check=False,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stdout + installed.stderr + self.describe()
        if self.generation() != generation:  # the pod's template changed: the Deployment replaces its pod
            wait_for(
                "the operator's old pod to be gone",
                lambda: not old_pods & {pod["metadata"]["name"] for pod in self.pods()},
                timeout_seconds=120,
            )
        wait_for("the operator's pod to answer", self.healthy, timeout_seconds=180)
        self._restarts = self.restarts()  # an upgrade that changed nothing of its pod keeps it, and its count

    def generation(self) -> int | None:
        """The operator Deployment's metadata.generation (None before the first install)."""
        shown = self.cluster.kubectl(
            "get", self.deployment, "-n", self.namespace, "-o", "jsonpath={.metadata.generation}", check=False
        )
        return int(shown.stdout) if shown.returncode == 0 and shown.stdout.strip() else None

    def uninstall(self) -> None:
        self.cluster.helm("uninstall", self.release, "--namespace", self.namespace, "--wait", check=False)
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)

    def rbac(self) -> ChartRbac:
        manifest = self.cluster.helm("get", "manifest", self.release, "--namespace", self.namespace).stdout
        documents = [document for document in yaml.safe_load_all(manifest) if document]
        (account,) = [document["metadata"]["name"] for document in documents if document["kind"] == "ServiceAccount"]
        (policy,) = [
            document["metadata"]["name"]
            for document in documents
            if document["kind"] == "ValidatingAdmissionPolicy" and "-operator-" in document["metadata"]["name"]
        ]
        return ChartRbac(self.namespace, account, policy.removesuffix("-operator-writes"))

    def pods(self) -> list[dict[str, Any]]:
        listed = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-l", COMPONENT, "-o", "json").stdout
        found: list[dict[str, Any]] = json.loads(listed)["items"]
        return found

    def live_pods(self) -> list[dict[str, Any]]:
        """Its pods not being deleted."""
        return [pod for pod in self.pods() if not pod["metadata"].get("deletionTimestamp")]

    def pod(self) -> dict[str, Any]:
        """The operator's pod (one at a time: the Deployment's strategy is Recreate)."""
        live = self.live_pods()
        assert len(live) == 1, [pod["metadata"]["name"] for pod in live]
        return live[0]

    def healthy(self) -> bool:
        """One pod, its container running and kopf's /healthz answering (what the chart's liveness probe asks;
        its readiness probe comes every 10 s)."""
        live = self.live_pods()
        if len(live) != 1:
            return False
        status = live[0].get("status") or {}
        running = [s for s in status.get("containerStatuses") or [] if (s.get("state") or {}).get("running")]
        if not running or not status.get("podIP"):
            return False
        try:
            url = f"http://{status['podIP']}:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=LIVENESS_TIMEOUT_SECONDS) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def start(self) -> None:
        self.cluster.kubectl("scale", self.deployment, "-n", self.namespace, "--replicas=1")
        wait_for("the operator's pod to be ready", self.healthy, timeout_seconds=120)

    def stop(self) -> None:
        """Scaled to no pod: its container stopped with SIGTERM, as at a node's drain."""
        self.cluster.kubectl("scale", self.deployment, "-n", self.namespace, "--replicas=0")
        wait_for("the operator's pod to be gone", lambda: not self.pods(), timeout_seconds=120)

    def kill(self) -> None:
        """SIGKILL to the operator's process in its container: no chance to clean up, as when the kernel kills
        it; the kubelet starts the container again (start() waits for it)."""
        pod = self.pod()
        pid = container_process(pod["metadata"]["uid"], "operator")
        assert pid is not None, f"no operator process in pod {pod['metadata']['name']}"
        os.kill(pid, signal.SIGKILL)
        self._restarts += 1
        wait_for("the kubelet to see the operator killed", lambda: self.restarts() >= self._restarts, 60)

    def restarts(self) -> int:
        statuses = (self.pod().get("status") or {}).get("containerStatuses") or []
        return sum(int(status.get("restartCount", 0)) for status in statuses)

    def metrics(self) -> str:
        address = self.pod()["status"]["podIP"]
        with urllib.request.urlopen(f"http://{address}:{self.metrics_port}/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

    def log(self) -> str:
        """What the operator's container printed since it (last) started."""
        pod = self.pod()["metadata"]["name"]
        return self.cluster.kubectl("logs", pod, "-n", self.namespace, check=False).stdout

    def log_mark(self) -> LogMark:
        return LogMark(self.pod()["metadata"]["name"], len(self.log()))

    def log_since(self, mark: LogMark) -> str:
        """What it printed after ``mark`` (all of it, when its pod is another since)."""
        text = self.log()
        return text[mark.length :] if self.pod()["metadata"]["name"] == mark.pod else text

    def assert_alive(self) -> None:
        """Ready, and never restarted but by kill()."""
        assert self.healthy(), self.describe()
        assert self.restarts() == self._restarts, self.describe()

    def describe(self) -> str:
        """Its pods and the end of its log, for a failure's message."""
        shown = self.cluster.kubectl("describe", "pods", "-n", self.namespace, "-l", COMPONENT, check=False).stdout
        logs = self.cluster.kubectl("logs", "-n", self.namespace, "-l", COMPONENT, "--tail", "60", check=False)
        return f"\n{shown[-3000:]}\n{logs.stdout[-4000:]}"

    def account_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig holding a token of the operator's ServiceAccount (to act as it, as a stolen token would)."""
        rbac = self.rbac()
        token = self.cluster.kubectl(
            "create", "token", rbac.service_account, "-n", self.namespace, "--duration=1h"
        ).stdout.strip()
        write_kubeconfig(path, self.cluster.server, self.cluster.pki.ca.certificate, rbac.service_account, token=token)
        return path

    @contextmanager
    def reconfigured(self, values: dict[str, Any]) -> Iterator[InstalledOperator]:
        """`helm upgrade` with ``values`` over the session's (e.g. other benchmarkDefaults: the operator restarts
        with them), and back afterwards."""
        before = self.layers
        self.install(*before, values)
        try:
            yield self
        finally:
            self.install(*before)
