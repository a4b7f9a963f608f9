"""The CRD on the real API server: kubectl explain, defaults, and bad manifests refused naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchmark.operator.resource.api import BatchBenchmarkSpec
from batchmark.runner.cli import build_parser
from batchmark.runner.config.load import load_config
from tests.cluster_fixtures import KubeCluster
from tests.integration.operator.conftest import CRD_PATH, kubectl_apply
from tests.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

VALID: dict[str, Any] = {
    "apiVersion": "batchmark.dev/v1alpha1",
    "kind": "BatchBenchmark",
    "metadata": {"name": "valid"},
    "spec": {
        "backend": {"model": "m", "engine": "simulated", "batchSize": 4, "simulation": {"timeScale": 0.01}},
        "data": {"promptTokens": 16, "outputTokens": 8},
        "profile": {"kind": "throughput"},
        "constraints": [{"kind": "max_requests", "count": 10}],
        "metrics": {"port": 9100},
    },
}


def changed(path: str, value: Any) -> dict[str, Any]:
    """VALID with the value at a dotted path (list indices as numbers) replaced; the value None removes it."""
    manifest = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node: Any = manifest
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return manifest


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("wrong type", changed("spec.backend.batchSize", "eight"), "spec.backend.batchSize"),
    ("out of range", changed("spec.backend.batchSize", 0), "spec.backend.batchSize"),
    ("unknown field", changed("spec.backend.bogus", 1), "spec.backend.bogus"),
    ("missing model", changed("spec.backend.model", None), "spec.backend.model"),
    # spec.data is a tagged union (synthetic_text, file, ...): the kind's rule names the field it lacks.
    (
        "missing output tokens",
        changed("spec.data.outputTokens", None),
        "spec.data: Invalid value: kind synthetic_text requires promptTokens, outputTokens",
    ),
    ("missing spec", changed("spec", None), "spec"),
    ("unknown profile kind", changed("spec.profile", {"kind": "burst"}), "spec.profile.kind"),
    ("required per kind", changed("spec.profile", {"kind": "concurrent"}), "spec.profile"),
    ("field of another kind", changed("spec.profile", {"kind": "throughput", "streams": 4}), "spec.profile.streams"),
    ("seed on throughput", changed("spec.profile", {"kind": "throughput", "seed": 1}), "spec.profile.seed"),
    ("rate must be positive", changed("spec.profile", {"kind": "constant", "rate": 0}), "spec.profile.rate"),
    ("sweep too small", changed("spec.profile", {"kind": "sweep", "sweepSize": 1}), "spec.profile.sweepSize"),
    ("no constraint", changed("spec.constraints", []), "spec.constraints"),
    ("unbounded run", changed("spec.constraints", [{"kind": "max_errors", "count": 3}]), "spec.constraints"),
    (
        "count below its kind's minimum",
        changed("spec.constraints", [{"kind": "max_requests", "count": 0}]),
        "spec.constraints[0].count",
    ),
    (
        "error rate above 1",
        changed("spec.constraints", [{"kind": "max_requests", "count": 5}, {"kind": "max_error_rate", "rate": 1.5}]),
        "spec.constraints[1].rate",
    ),
    (
        "min above max",
        changed("spec.data", {"promptTokens": 16, "outputTokens": 8, "promptTokensMin": 64, "promptTokensMax": 32}),
        "spec.data.promptTokensMin",
    ),
    ("two ways of warm-up", changed("spec.profile.warmup", {"requests": 2, "seconds": 1}), "spec.profile.warmup"),
    (
        "cool-down requests without max_requests",
        {
            **changed("spec.constraints", [{"kind": "max_duration", "seconds": 5}]),
        },
        "spec.profile.cooldown.requests",
    ),
    ("unknown engine", changed("spec.backend.engine", "tpu"), "spec.backend.engine"),
    ("unknown dispatch", changed("spec.backend.dispatch", "sometimes"), "spec.backend.dispatch"),
    ("negative retries", changed("spec.retries", -1), "spec.retries"),
    ("port out of range", changed("spec.metrics.port", 70000), "spec.metrics.port"),
    ("not a URL", changed("spec.metrics.pushgateway", "ftp://gateway"), "spec.metrics.pushgateway"),
    ("pull policy", changed("spec.imagePullPolicy", "Sometimes"), "spec.imagePullPolicy"),
    ("shm size type", changed("spec.shmSize", True), "spec.shmSize"),
    ("toleration effect", changed("spec.tolerations", [{"key": "a", "effect": "Never"}]), "spec.tolerations[0].effect"),
    ("zero timeout", changed("spec.timeout", 0), "spec.timeout"),
    ("name too long", changed("metadata.name", "b" * 64), "metadata.name"),
    ("data file without a path", changed("spec.data", {"kind": "file"}), "kind file requires path"),
    ("file option on synthetic data", changed("spec.data.promptColumn", "q"), "spec.data.promptColumn"),
    (
        "data volume of two sources",
        changed("spec.dataVolume", {"configMap": "a", "claimName": "b"}),
        "give one of configMap or claimName",
    ),
    ("negative metrics linger", changed("spec.metrics.lingerSeconds", -1), "spec.metrics.lingerSeconds"),
    ("metrics linger over an hour", changed("spec.metrics.lingerSeconds", 3601), "spec.metrics.lingerSeconds"),
    ("metrics linger as text", changed("spec.metrics.lingerSeconds", "15s"), "spec.metrics.lingerSeconds"),
]
INVALID[18][1]["spec"]["profile"] = {"kind": "throughput", "cooldown": {"requests": 2}}


def test_kubectl_explain_shows_the_models_descriptions(batchmark_crd: KubeCluster) -> None:
    # The API server publishes a new CRD's OpenAPI a moment after it is established.
    wait_for(
        "the CRD's OpenAPI",
        lambda: batchmark_crd.kubectl("explain", "bb.spec.backend.batchSize", check=False).returncode == 0,
        60,
    )
    explained = batchmark_crd.kubectl("explain", "bb.spec.backend.batchSize").stdout
    assert "Requests per micro-batch" in explained
    explained = batchmark_crd.kubectl("explain", "bb.spec.profile.maxConcurrency").stdout
    assert "512 for kind throughput, sweep; unset for kind constant, poisson" in " ".join(explained.split())
    assert "LoadingEngine" in batchmark_crd.kubectl("explain", "bb.status.phase").stdout


@pytest.mark.parametrize(("case", "manifest", "field"), INVALID, ids=[case for case, _, _ in INVALID])
def test_invalid_manifests_are_refused_naming_the_field(
    batchmark_crd: KubeCluster, kube_namespace: str, case: str, manifest: dict[str, Any], field: str
) -> None:
    assert len(INVALID) >= 20
    result = kubectl_apply(batchmark_crd, kube_namespace, yaml.safe_dump(manifest), "--dry-run=server")
    assert result.returncode != 0, f"{case}: accepted\n{result.stdout}"
    assert field in result.stderr, f"{case}: {result.stderr}"


# Every optional field of the spec, with a valid value (the API server accepts the whole).
OPTIONAL: dict[str, Any] = {
    "sampleRequests": 3,
    "sweep": {"batchSize": [2, 4]},
    "slo": {"request_latency_p99": 2.0},
    "cost": {"gpuCostPerHour": 2.5},
    "device": "cpu",
    "image": "example.org/runner:1",
    "imagePullPolicy": "IfNotPresent",
    "imagePullSecrets": [{"name": "registry"}],
    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    "nodeSelector": {"gpu": "a100"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {}},
    "priorityClassName": "batch",
    "queueName": "gpus",
    "runtimeClassName": "nvidia",
    "env": [{"name": "A", "value": "1"}],
    "envFrom": [{"configMapRef": {"name": "settings"}}],
    "hfTokenSecret": {"name": "hf"},
    "modelCache": {"claimName": "models"},
    "shmSize": "4Gi",
    "timeout": 600,
    "timeouts": {"pending": 600, "imagePull": 300, "containerCreate": 300},
    "retries": 2,
    "ttlSecondsAfterFinished": 60,
    "metrics": {"port": 9000},
    "repeats": 3,
    "dataVolume": {"configMap": "prompts"},
    "parallelism": {"replicas": 2},
    "results": {"store": {"claimName": "runs", "path": "nightly"}},
    "baseline": "last",
}
# The required fields, each with another valid value.
REQUIRED_CHANGED: dict[str, Any] = {
    "backend": {"model": "m", "engine": "simulated", "batchSize": 8, "simulation": {"timeScale": 0.01}},
    "data": {"promptTokens": 17, "outputTokens": 8},
    "profile": {"kind": "constant", "rate": 2},
    "constraints": [{"kind": "max_requests", "count": 9}],
}


def refused_as_immutable(result: Any, field: str) -> None:
    assert result.returncode != 0, f"spec.{field} could be changed"
    assert f"spec.{field}" in result.stderr, result.stderr
    assert "immutable" in result.stderr, result.stderr


def test_every_field_of_the_spec_but_cancel_is_immutable(batchmark_crd: KubeCluster, kube_namespace: str) -> None:
    """Results describe the spec they ran: no field may change, appear or go after creation; cancel may."""
    version = yaml.safe_load(CRD_PATH.read_text())["spec"]["versions"][0]
    schema_fields = set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    assert schema_fields == {*OPTIONAL, *REQUIRED_CHANGED, "cancel"}, "a new spec field needs a case here"

    def apply(name: str, spec: dict[str, Any]) -> Any:
        manifest = {**VALID, "metadata": {"name": name}, "spec": spec}
        return kubectl_apply(batchmark_crd, kube_namespace, yaml.safe_dump(manifest))

    full = {**VALID["spec"], **OPTIONAL}
    created = apply("full", full)
    assert created.returncode == 0, created.stderr
    created = apply("minimal", VALID["spec"])
    assert created.returncode == 0, created.stderr
    for field, value in REQUIRED_CHANGED.items():
        refused_as_immutable(apply("full", {**full, field: value}), field)
    for field, value in OPTIONAL.items():
        without = {key: kept for key, kept in full.items() if key != field}
        refused_as_immutable(apply("full", without), field)  # removed (or back to its default)
        refused_as_immutable(apply("minimal", {**VALID["spec"], field: value}), field)  # added
    refused_as_immutable(apply("full", {**full, "image": "example.org/runner:2"}), "image")  # changed
    cancelled = apply("full", {**full, "cancel": True})
    assert cancelled.returncode == 0, cancelled.stderr


def test_conditions_are_keyed_by_type_and_times_are_date_times(batchmark_crd: KubeCluster, kube_namespace: str) -> None:
    created = kubectl_apply(batchmark_crd, kube_namespace, yaml.safe_dump(VALID))
    assert created.returncode == 0, created.stderr

    def patch_status(status: dict[str, Any]) -> Any:
        arguments = ["patch", "bb", "valid", "-n", kube_namespace, "--subresource=status", "--type=merge"]
        return batchmark_crd.kubectl(*arguments, "-p", json.dumps({"status": status}), check=False)

    def condition(kind: str, when: str = "2026-01-02T03:04:05Z") -> dict[str, str]:
        return {"type": kind, "status": "True", "reason": "Test", "lastTransitionTime": when}

    accepted = patch_status(
        {"conditions": [condition("Scheduled"), condition("Complete")], "startTime": "2026-01-02T03:04:05Z"}
    )
    assert accepted.returncode == 0, accepted.stderr
    twice = patch_status({"conditions": [condition("Scheduled"), condition("Scheduled")]})
    assert twice.returncode != 0
    assert "Duplicate value" in twice.stderr, twice.stderr
    for status in (
        {"conditions": [condition("Scheduled", when="yesterday")]},
        {"startTime": "not a time"},
        {"completionTime": "2026-13-45"},
    ):
        refused = patch_status(status)
        assert refused.returncode != 0, status
        assert "date-time" in refused.stderr, refused.stderr


@pytest.mark.parametrize(("profile", "concurrency"), [("kind=throughput", 512), ("kind=constant,rate=4", None)])
def test_the_api_servers_defaults_give_the_same_run_config_as_the_cli(
    batchmark_crd: KubeCluster, kube_namespace: str, profile: str, concurrency: int | None
) -> None:
    arguments = [
        "--name",
        "same",
        "--backend",
        "kind=vllm_python_batch,model=m,engine=simulated,simulation.time_scale=0.01",
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        profile,
        "--constraint",
        "kind=max_requests,count=10",
    ]
    parser = build_parser()
    from_cli = load_config(parser.parse_args(["run", *arguments]))
    printed = yaml.safe_dump(
        {
            "apiVersion": "batchmark.dev/v1alpha1",
            "kind": "BatchBenchmark",
            "metadata": {"name": "same"},
            # Only what a person writes: the API server fills in the schema's defaults.
            "spec": from_cli.model_dump(
                mode="json", by_alias=True, exclude_defaults=True, include={"backend", "data", "profile", "constraints"}
            ),
        }
    )
    result = kubectl_apply(batchmark_crd, kube_namespace, printed)
    assert result.returncode == 0, result.stderr
    stored = yaml.safe_load(batchmark_crd.kubectl("get", "bb", "same", "-n", kube_namespace, "-o", "yaml").stdout)
    assert stored["spec"]["backend"]["batchSize"] == 32  # the schema's default, applied by the API server
    assert ("maxConcurrency" in stored["spec"]["profile"]) is False
    from_cr = BatchBenchmarkSpec.model_validate(stored["spec"]).run_config(stored["metadata"]["name"])
    assert from_cr == from_cli
    assert getattr(from_cr.profile, "max_concurrency", None) == concurrency


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_passes_the_api_servers_validation(
    batchmark_crd: KubeCluster, kube_namespace: str, path: Path
) -> None:
    """The real-GPU examples (tensor parallelism, model cache) are never run here, but the schema takes them."""
    result = kubectl_apply(batchmark_crd, kube_namespace, path.read_text(encoding="utf-8"), "--dry-run=server")
    assert result.returncode == 0, result.stderr
