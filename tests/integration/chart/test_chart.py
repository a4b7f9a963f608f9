"""charts/batchmark with the real helm: lint, the rendered manifests against Kubernetes' schemas, what each
values file makes, bad values refused by the schema, and checkov over the result."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from batchmark.operator.controller import children
from batchmark.operator.controller.rbac import OPERATOR_RULES
from batchmark.operator.controller.service import load_defaults
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults
from dashboards.build import CHART_DASHBOARDS
from dashboards.promql import contract_problems
from tests.integration.chart.helm import CHART, NAMESPACE, RELEASE, ROOT, VALUES, find, helm, render, template_arguments

pytestmark = pytest.mark.integration

KUBERNETES = "1.37.0"
VALUES_FILES = sorted(VALUES.glob("*.yaml"))
CASES = [pytest.param([], id="defaults"), *(pytest.param([path], id=path.stem) for path in VALUES_FILES)]
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.mark.parametrize("values", CASES)
def test_helm_lint_strict_is_clean(values: list[Path]) -> None:
    arguments = ["lint", "--strict", str(CHART)]
    for path in values:
        arguments += ["--values", str(path)]
    result = helm(*arguments)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


@pytest.mark.parametrize("values", CASES)
def test_the_rendered_manifests_are_valid_kubernetes_objects(values: list[Path]) -> None:
    documents = render(values, monitoring=True)
    validated = 0
    for document in documents:
        if document["kind"] in MONITORING_KINDS:
            continue  # the Prometheus Operator's CRDs are not Kubernetes' schemas; promtool checks the rules
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
        validated += 1
    assert validated >= 10


def test_the_operator_deployment_is_restricted_and_recreated() -> None:
    (deployment,) = find(render(), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["command"][:2] == ["batchmark", "operator"]
    assert "--defaults=/etc/batchmark/defaults.yaml" in container["command"]
    assert not any(argument.startswith("--namespace") for argument in container["command"])
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert set(container["resources"]) == {"requests", "limits"}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "batchmark"
    assert labels["app.kubernetes.io/component"] == "operator"


def test_cluster_wide_rbac_by_default_and_roles_per_namespace_when_listed() -> None:
    documents = render()
    (cluster_role,) = find(documents, "ClusterRole", "-operator")
    resources = {resource for rule in cluster_role["rules"] for resource in rule["resources"]}
    assert {"batchbenchmarks", "jobs", "pods", "customresourcedefinitions", "namespaces"} <= resources
    assert not find(documents, "Role")
    assert "secrets" not in resources

    namespaced = render([VALUES / "namespaced.yaml"])
    (cluster_role,) = find(namespaced, "ClusterRole", "-operator")
    assert [rule["resources"] for rule in cluster_role["rules"]] == [
        ["customresourcedefinitions"],
        ["namespaces"],
        ["workloadpriorityclasses"],
    ]
    roles = find(namespaced, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in find(namespaced, "RoleBinding")) == ["team-a", "team-b"]
    (deployment,) = find(namespaced, "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--namespace=team-a" in command
    assert "--namespace=team-b" in command
    assert not find(namespaced, "ClusterRole", "-view")


def test_the_operators_rbac_is_exactly_what_the_operator_declares() -> None:
    def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) for each permission, however the rules group them."""
        return {
            (group, resource, verb)
            for rule in rules
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    declared = grants(OPERATOR_RULES)
    (cluster_role,) = find(render(), "ClusterRole", "-operator")
    assert grants(cluster_role["rules"]) == declared
    # Per namespace, the same permissions split: namespaced ones in each Role, cluster-scoped ones in the
    # ClusterRole, namespaces among them (kopf lists and watches them when it is given a list too; refused, it
    # retried for ~35 s before serving: tests/integration/operator/test_operator_namespace.py).
    namespaced = render([VALUES / "namespaced.yaml"])
    (cluster_role,) = find(namespaced, "ClusterRole", "-operator")
    (role, _) = find(namespaced, "Role")
    assert {resource for _, resource, _ in grants(cluster_role["rules"])} == {
        "customresourcedefinitions",
        "namespaces",
        "workloadpriorityclasses",
    }
    assert grants(cluster_role["rules"]) | grants(role["rules"]) == declared


def test_the_admission_policies_protect_the_system_the_release_and_the_listed_namespaces() -> None:
    policies = {policy["metadata"]["name"]: policy for policy in find(render(), "ValidatingAdmissionPolicy")}
    assert set(policies) == {f"{RELEASE}-operator-writes", f"{RELEASE}-runner-writes"}
    bindings = find(render(), "ValidatingAdmissionPolicyBinding")
    assert {(b["spec"]["policyName"], *b["spec"]["validationActions"]) for b in bindings} == {
        (name, "Deny") for name in policies
    }
    (operator,) = policies[f"{RELEASE}-operator-writes"]["spec"]["matchConditions"]
    assert operator["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{RELEASE}"'

    def protected(sets: list[str]) -> list[str]:
        (policy,) = [
            p for p in find(render(sets=sets), "ValidatingAdmissionPolicy") if "-operator-" in p["metadata"]["name"]
        ]
        (expression,) = [
            v["expression"] for v in policy["spec"]["validations"] if "request.namespace in" in v["expression"]
        ]
        names: list[str] = json.loads(expression.removeprefix("!(request.namespace in ").removesuffix(")"))
        return names

    assert protected([]) == ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]
    assert protected(["rbac.protectedNamespaces={team-x,kube-system}"])[-1:] == ["team-x"]
    assert not find(render(sets=["rbac.create=false"]), "ValidatingAdmissionPolicy")


@pytest.mark.parametrize("watched", [NAMESPACE, "kube-system", "team-x"])
def test_a_protected_namespace_cannot_be_watched(watched: str) -> None:
    sets = [f"operator.watchNamespaces={{team-a,{watched}}}", "rbac.protectedNamespaces={team-x}"]
    result = helm(*template_arguments(sets=sets))
    assert result.returncode != 0
    assert f"operator.watchNamespaces: {watched} is protected" in result.stderr, result.stderr


def test_edit_and_view_users_get_batchbenchmarks_through_aggregation() -> None:
    documents = render()
    (view,) = find(documents, "ClusterRole", "-view")
    (edit,) = find(documents, "ClusterRole", "-edit")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in edit["metadata"]["labels"]
    assert set(view["rules"][0]["verbs"]) == {"get", "list", "watch"}
    assert {"create", "delete", "patch"} <= set(edit["rules"][0]["verbs"])


def test_monitors_and_rules_only_when_enabled_and_the_api_exists() -> None:
    monitors = VALUES / "monitors.yaml"
    without_api = {d["kind"] for d in render([monitors], monitoring=False)}
    assert not without_api & MONITORING_KINDS
    off = {d["kind"] for d in render([], monitoring=True)}
    assert not off & MONITORING_KINDS
    documents = render([monitors], monitoring=True)
    for kind in MONITORING_KINDS:
        (found,) = find(documents, kind)
        assert found["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (pod_monitor,) = find(documents, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "batchmark",
        "app.kubernetes.io/component": "benchmark",
    }
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    (service_monitor,) = find(documents, "ServiceMonitor")
    (service,) = find(documents, "Service", "-metrics")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"][0]["interval"] == "15s"
    assert service_monitor["spec"]["endpoints"][0]["honorLabels"] is True  # results keep their namespace


def test_the_dashboards_ship_as_configmaps_for_grafanas_sidecar() -> None:
    documents = render([VALUES / "monitors.yaml"])
    maps = [d for d in find(documents, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]
    shipped = {name: text for d in maps for name, text in d["data"].items()}
    assert shipped.keys() == {path.name for path in CHART_DASHBOARDS.glob("*.json")}
    for name, text in shipped.items():
        assert json.loads(text) == json.loads((CHART_DASHBOARDS / name).read_text())
    for configmap in maps:
        assert configmap["metadata"]["namespace"] == "monitoring"
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "Benchmarks"}
    relabelled = render(sets=["dashboards.label=my_dashboards", "dashboards.folderAnnotation=k8s-sidecar/folder"])
    maps = [d for d in find(relabelled, "ConfigMap") if "my_dashboards" in d["metadata"]["labels"]]
    assert len(maps) == len(shipped)
    assert all("k8s-sidecar/folder" in m["metadata"]["annotations"] for m in maps)


def plain_spec() -> BatchBenchmarkSpec:
    """A benchmark that names nothing the operator's defaults give (image, device, resources)."""
    return BatchBenchmarkSpec.model_validate(
        {
            "backend": {"model": "Qwen/Qwen3-0.6B"},
            "data": {"promptTokens": 16, "outputTokens": 8},
            "profile": {"kind": "throughput"},
            "constraints": [{"kind": "max_requests", "count": 10}],
        }
    )


def defaults_file(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (configmap,) = find(documents, "ConfigMap", "-defaults")
    loaded: dict[str, Any] = yaml.safe_load(configmap["data"]["defaults.yaml"])
    return loaded


def test_benchmark_defaults_render_into_the_operators_defaults_file() -> None:
    assert defaults_file(render()) == {
        "device": "gpu",
        "image": "batchmark-runner:0.1.0",
        "cpuImage": "batchmark-runner-cpu:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        "timeouts": {"pending": 3600, "imagePull": 900, "containerCreate": 900},
    }
    custom = defaults_file(render([VALUES / "custom-images.yaml"]))
    OperatorDefaults.model_validate(custom)  # what the operator reads with --defaults (unknown keys refused)
    OperatorDefaults.model_validate(defaults_file(render()))
    assert custom == {
        "device": "gpu",
        "image": "registry.example.com:5000/ml/batchmark-runner@sha256:"
        "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        "cpuImage": "registry.example.com:5000/ml/batchmark-runner-cpu:0.1.0-cpu",
        "imagePullPolicy": "Always",
        "imagePullSecrets": [{"name": "registry-credentials"}],
        "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}, "requests": {"cpu": "8", "memory": "32Gi"}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "modelCache": {"claimName": "hf-cache", "mountPath": "/cache/huggingface"},
        "hfTokenSecret": {"name": "hf-token", "key": "HF_TOKEN"},
        "queueName": "gpu-queue",
        "results": {"store": {"claimName": "batchmark-results", "path": "nightly"}},
        "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        "timeouts": {"pending": 600, "imagePull": 1800, "containerCreate": 120},
    }
    # Or a bucket: only what is given, the rest left to AWS's defaults and the pods' identity.
    store = "benchmarkDefaults.results.store"
    bucket = defaults_file(
        render(
            [VALUES / "custom-images.yaml"],
            sets=[
                f"{store}.claimName=",
                f"{store}.path=",
                f"{store}.url=s3://team-runs/nightly",
                f"{store}.endpoint=https://minio.storage.svc:9000",
                f"{store}.credentialsSecret=runs-s3",
            ],
        )
    )
    assert bucket["results"] == {
        "store": {
            "url": "s3://team-runs/nightly",
            "endpoint": "https://minio.storage.svc:9000",
            "credentialsSecret": "runs-s3",
        }
    }
    operator_defaults = OperatorDefaults.model_validate(bucket)
    assert operator_defaults.apply(plain_spec()).run_config("a").store == "s3://team-runs/nightly"
    region = defaults_file(render(sets=[f"{store}.url=s3://team-runs", f"{store}.region=eu-west-3"]))
    assert region["results"] == {"store": {"url": "s3://team-runs", "region": "eu-west-3"}}


def test_a_change_of_defaults_rolls_the_operator() -> None:
    def checksum(documents: list[dict[str, Any]]) -> str:
        (deployment,) = find(documents, "Deployment")
        value: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/defaults"]
        return value

    assert checksum(render()) != checksum(render(sets=["benchmarkDefaults.queueName=other"]))


def test_a_cluster_of_cpu_nodes_runs_every_benchmark_on_cpu_in_the_cpu_runner_image() -> None:
    rendered = defaults_file(render(sets=["benchmarkDefaults.device=cpu"]))
    defaults = OperatorDefaults.model_validate(rendered)
    spec = plain_spec()
    job = children.job(children.Owner("team", "on-cpu", "uid-1"), defaults.apply(spec))
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "batchmark-runner-cpu:0.1.0"
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert "tolerations" not in job["spec"]["template"]["spec"]


def test_custom_images_and_digests() -> None:
    documents = render([VALUES / "custom-images.yaml"])
    (deployment,) = find(documents, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == (
        "registry.example.com:5000/ml/batchmark-operator@sha256:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["serviceAccountName"] == "batchmark-operator"


def test_a_runner_image_pinned_by_digest_is_what_benchmark_jobs_run(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    documents = render(
        sets=["benchmarkDefaults.image.repository=registry.example/runner", f"benchmarkDefaults.image.digest={digest}"]
    )
    (configmap,) = find(documents, "ConfigMap", "-defaults")
    path = tmp_path / "defaults.yaml"
    path.write_text(configmap["data"]["defaults.yaml"])
    defaults = load_defaults(path)  # as the operator reads its --defaults file
    spec = plain_spec()
    job = children.job(children.Owner("team", "pinned", "uid-1"), defaults.apply(spec))
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.example/runner@{digest}"


def test_openshift_values_leave_the_ids_to_the_platform() -> None:
    def ids(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        (deployment,) = find(documents, "Deployment")
        (test_pod,) = find(documents, "Pod", "-test")
        pods = [deployment["spec"]["template"]["spec"], test_pod["spec"]]
        return [
            context for pod in pods for context in (pod["securityContext"], pod["containers"][0]["securityContext"])
        ]

    fixed = ids(render())
    deployment_pod, deployment_container, test_pod, _ = fixed
    assert {key: deployment_pod[key] for key in ("runAsUser", "runAsGroup", "fsGroup")} == {
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
    }
    assert deployment_container["runAsUser"] == test_pod["runAsUser"] == 10001
    for context in ids(render([VALUES / "openshift.yaml"])):
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & context.keys(), context
        assert context["runAsNonRoot"] is True
    (deployment,) = find(render([VALUES / "openshift.yaml"]), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"]


def test_benchmark_pods_ids_left_to_the_platform_or_an_arbitrary_uid_with_gid_0(tmp_path: Path) -> None:
    spec = plain_spec()

    def pod_security(documents: list[dict[str, Any]]) -> dict[str, Any]:
        path = tmp_path / "defaults.yaml"
        path.write_text(yaml.safe_dump(defaults_file(documents)))
        defaults = load_defaults(path)  # as the operator reads its --defaults file
        owner = children.Owner("team", "ids", "uid-1")
        job = children.job(owner, defaults.apply(spec), None, defaults.security_context)
        context: dict[str, Any] = job["spec"]["template"]["spec"]["securityContext"]
        return context

    fixed = pod_security(render())
    assert {key: fixed[key] for key in ("runAsUser", "runAsGroup", "fsGroup")} == dict.fromkeys(
        ("runAsUser", "runAsGroup", "fsGroup"), 10001
    )
    platform = pod_security(render([VALUES / "openshift.yaml"]))
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & platform.keys(), platform
    assert platform["runAsNonRoot"] is True
    sets = ["benchmarkDefaults.securityContext.runAsUser=1234567", "benchmarkDefaults.securityContext.runAsGroup=0"]
    arbitrary = pod_security(render(sets=[*sets, "benchmarkDefaults.securityContext.fsGroup=null"]))
    assert (arbitrary["runAsUser"], arbitrary["runAsGroup"], "fsGroup" in arbitrary) == (1234567, 0, False)


def test_alerts_need_a_job_that_scrapes_the_operator() -> None:
    """A PrometheusRule without the ServiceMonitor (or a job named instead) has no operator series to watch, and
    BatchmarkOperatorDown would fire for ever: refused, with the values that fix it."""
    refused = helm(*template_arguments(sets=["monitoring.prometheusRule.enabled=true"], monitoring=True))
    assert refused.returncode != 0
    assert "monitoring.serviceMonitor.enabled" in refused.stderr
    assert "alerts.operatorJob" in refused.stderr
    documents = render(
        sets=["monitoring.prometheusRule.enabled=true", "alerts.operatorJob=kubernetes-service-endpoints"],
        monitoring=True,
    )
    (rule,) = find(documents, "PrometheusRule")
    expressions = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert all('job="kubernetes-service-endpoints"' in expr for expr in expressions)
    assert not find(documents, "ServiceMonitor")


def test_the_crd_is_kept_on_uninstall_and_is_the_generated_one() -> None:
    (crd,) = find(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    generated = yaml.safe_load((ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml").read_text())
    # The template splices its annotation into the file's metadata: a second annotations key would clash.
    assert "annotations" not in generated["metadata"]
    assert crd["metadata"] == {**generated["metadata"], "annotations": {"helm.sh/resource-policy": "keep"}}
    assert crd["spec"] == generated["spec"]
    assert crd["metadata"]["name"] == generated["metadata"]["name"]
    assert (CHART / "files" / "batchmark.dev_batchbenchmarks.yaml").read_text() == (
        ROOT / "crds" / "batchmark.dev_batchbenchmarks.yaml"
    ).read_text()
    (unkept,) = find(render(sets=["crd.keep=false"]), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in unkept["metadata"].get("annotations", {})
    assert not find(render(sets=["crd.install=false"]), "CustomResourceDefinition")


BAD_VALUES = [
    (["operator.metrics.port=0"], "operator/metrics/port"),
    (["operator.metrics.port=70000"], "operator/metrics/port"),
    (["operator.image.pullPolicy=Sometimes"], "operator/image/pullPolicy"),
    (["operator.image.digest=latest"], "operator/image/digest"),
    (["operator.watchNamespaces={Team_A}"], "operator/watchNamespaces/0"),
    (["operator.replicas=2"], "replicas"),
    (["benchmarkDefaults.image.digest=latest"], "benchmarkDefaults/image/digest"),
    (["benchmarkDefaults.modelCache.mountPath=models"], "benchmarkDefaults/modelCache/mountPath"),
    (["benchmarkDefaults.results.store.path=/abs"], "benchmarkDefaults/results/store/path"),
    (["benchmarkDefaults.results.store.claimName=Not_A_Name"], "benchmarkDefaults/results/store/claimName"),
    (
        ["benchmarkDefaults.results.store.claimName=runs", "benchmarkDefaults.results.store.url=s3://runs"],
        "benchmarkDefaults/results/store/url",
    ),
    (["benchmarkDefaults.results.store.url=S3://Runs"], "benchmarkDefaults/results/store/url"),
    (["benchmarkDefaults.results.store.url=http://minio:9000/runs"], "benchmarkDefaults/results/store/url"),
    (
        ["benchmarkDefaults.results.store.url=s3://runs", "benchmarkDefaults.results.store.path=nightly"],
        "benchmarkDefaults/results/store/path",
    ),
    (
        ["benchmarkDefaults.results.store.url=s3://runs", "benchmarkDefaults.results.store.endpoint=minio:9000"],
        "benchmarkDefaults/results/store/endpoint",
    ),
    (["benchmarkDefaults.results.store.region=eu-west-3"], "benchmarkDefaults/results/store/region"),
    (
        ["benchmarkDefaults.results.store.claimName=runs", "benchmarkDefaults.results.store.credentialsSecret=s3"],
        "benchmarkDefaults/results/store/credentialsSecret",
    ),
    (
        ["benchmarkDefaults.results.store.url=s3://runs", "benchmarkDefaults.results.store.credentialsSecret=S3_Keys"],
        "benchmarkDefaults/results/store/credentialsSecret",
    ),
    (["operator.securityContext.runAsUser=0"], "operator/securityContext/runAsUser"),
    (["alerts.failedFiresFor=1h30m"], "alerts/failedFiresFor"),
    (["benchmarkDefaults.imagePullSecrets=oops"], "benchmarkDefaults/imagePullSecrets"),
    (["benchmarkDefaults.resources.limits.memory=lots"], "benchmarkDefaults/resources/limits/memory"),
    (["alerts.schedulingFor=30 minutes"], "alerts/schedulingFor"),
    (["benchmarkDefaults.timeouts.pending=0"], "benchmarkDefaults/timeouts/pending"),
    (["benchmarkDefaults.timeouts.imagePull=10m"], "benchmarkDefaults/timeouts/imagePull"),
    (["benchmarkDefaults.timeouts.containerCreate=null"], "missing property 'containerCreate'"),
    (["benchmarkDefaults.timeouts.pending=604801"], "benchmarkDefaults/timeouts/pending"),
    (["benchmarkDefaults.timeouts.queued=5"], "queued"),
    (["alerts.reconcileErrorRatio=2"], "alerts/reconcileErrorRatio"),
    (["crd.install=yes"], "crd/install"),
    (["monitoring.podMonitor.enable=true"], "enable"),
    (["dashboards.namespace=Monitoring"], "dashboards/namespace"),
    (["rbac.protectedNamespaces={Kube_System}"], "rbac/protectedNamespaces/0"),
]


@pytest.mark.parametrize(("sets", "named"), BAD_VALUES, ids=[case[0][0] for case in BAD_VALUES])
def test_bad_values_are_refused_with_a_message_naming_the_value(sets: list[str], named: str) -> None:
    result = helm("template", "batchmark", str(CHART), "--namespace", NAMESPACE, *(f"--set={s}" for s in sets))
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


def test_checkov_passes_with_every_skip_explained(tmp_path: Path) -> None:
    checkov = ROOT / ".venv-checkov" / "bin" / "checkov"
    if not checkov.exists():
        pytest.fail("checkov is not installed: run scripts/setup/checkov.sh (scripts/test does)")
    config = yaml.safe_load((CHART / ".checkov.yaml").read_text())
    explained = {
        line.split("#")[0].strip(" -")
        for line in (CHART / ".checkov.yaml").read_text().splitlines()
        if line.strip().startswith("- CKV") and "#" in line
    }
    assert set(config["skip-check"]) == explained, "every skipped check has its reason beside it"
    for index, values in enumerate([[], *([path] for path in VALUES_FILES)]):
        documents = render(values, monitoring=True)
        for document in documents:  # a skip on one object says why after its `=`
            for key, value in document["metadata"].get("annotations", {}).items():
                if key.startswith("checkov.io/skip"):
                    assert re.fullmatch(r"CKV2?_K8S_\d+=\S.{20,}", value), f"{key}: {value} gives no reason"
        manifests = tmp_path / f"rendered-{index}.yaml"
        manifests.write_text(yaml.safe_dump_all(documents))
        result = subprocess.run(
            [
                str(checkov),
                "--config-file",
                str(CHART / ".checkov.yaml"),
                "--file",
                str(manifests),
                "--framework",
                "kubernetes",
                "--compact",
                "--quiet",
                "--skip-download",  # no Prisma Cloud: nothing to fetch, and no network here
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"{values}: {result.stdout[-6000:]}{result.stderr[-2000:]}"


def test_promtool_checks_and_unit_tests_the_alerts(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run scripts/setup/system.sh"
    (rule,) = find(render([VALUES / "monitors.yaml"], monitoring=True), "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    checked = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout
    shutil.copy(Path(__file__).parent / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    tested = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "alerts.test.yaml")], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rendered_rules_read_declared_series_and_labels() -> None:
    """What tests/unit/dashboards/test_contract.py checks on the template, on the rules helm renders."""
    (rule,) = find(render([VALUES / "monitors.yaml"], monitoring=True), "PrometheusRule")
    exprs = [each["expr"] for group in rule["spec"]["groups"] for each in group["rules"]]
    assert len(exprs) == 5
    for expr in exprs:
        assert not contract_problems(expr), f"{contract_problems(expr)} in {expr}"


def test_a_schedule_creates_benchmarks_with_a_fresh_name_and_may_do_nothing_else() -> None:
    documents = render([VALUES / "schedules.yaml"])
    (cron_job,) = find(documents, "CronJob")
    assert cron_job["metadata"]["namespace"] == "ml-benchmarks"
    assert len(cron_job["metadata"]["name"]) <= 52
    assert cron_job["spec"]["schedule"] == "0 2 * * *"
    assert cron_job["spec"]["timeZone"] == "Etc/UTC"
    assert cron_job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["batchmark", "submit", "--file", "/etc/batchmark/schedule/benchmark.yaml"]
    (deployment,) = find(documents, "Deployment")
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    # Least privilege: its own account, which may create BatchBenchmarks in that namespace, and nothing else.
    (role,) = [role for role in find(documents, "Role") if role["metadata"]["name"] == cron_job["metadata"]["name"]]
    assert role["metadata"]["namespace"] == "ml-benchmarks"
    assert role["rules"] == [{"apiGroups": ["batchmark.dev"], "resources": ["batchbenchmarks"], "verbs": ["create"]}]
    (binding,) = [
        each for each in find(documents, "RoleBinding") if each["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "ml-benchmarks"}
    ]
    # The manifest it submits: a BatchBenchmark the operator takes, with a generated name and the schedule's label.
    (config_map,) = [
        each for each in find(documents, "ConfigMap") if each["metadata"]["name"] == role["metadata"]["name"]
    ]
    manifest = yaml.safe_load(config_map["data"]["benchmark.yaml"])
    assert manifest["metadata"] == {
        "generateName": "qwen3-nightly-",
        "labels": {"batchmark.dev/schedule": "qwen3-nightly", "app.kubernetes.io/created-by": "batchmark"},
    }
    spec = BatchBenchmarkSpec.model_validate(manifest["spec"])
    assert spec.baseline == "last"
    assert spec.results is not None
    assert not find(render(), "CronJob")  # none by default
