"""spec.results.store and spec.baseline: the claim mounted for the runner's store, or an S3 bucket's endpoint,
region and credentials given to the runner; the run's config naming the store, the refusals, and the Regressed
condition and series from the runner's verdict."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from batchmark.operator.controller import children
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.status import Observation, build_status
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults, ResultsStore
from batchmark.runner import contract
from tests.unit.operator.test_children import OWNER, pod_spec, spec
from tests.unit.operator.test_status import job, pod

STORE = {"store": {"claimName": "runs", "path": "team-a/nightly"}}
BUCKET = {
    "store": {
        "url": "s3://bench-runs/team-a/nightly",
        "endpoint": "http://minio.storage.svc:9000",
        "region": "eu-west-3",
        "credentialsSecret": "bench-s3",
    }
}
BUCKET_DEFAULTS = {
    "results": {
        "store": {"url": "s3://team-runs/all", "endpoint": "https://s3.example.com", "credentialsSecret": "runs-s3"}
    }
}


def test_the_store_claim_is_mounted_and_the_run_keeps_its_runs_there() -> None:
    benchmark = spec(results=STORE, baseline="last", repeats=3)
    pod = pod_spec(children.job(OWNER, benchmark))
    assert {"name": "results-store", "persistentVolumeClaim": {"claimName": "runs"}} in pod["volumes"]
    assert {"name": "results-store", "mountPath": contract.STORE_MOUNT_PATH} in pod["containers"][0]["volumeMounts"]
    config = benchmark.run_config("qwen3")
    assert config.store == f"{contract.STORE_MOUNT_PATH}/team-a/nightly"
    assert config.baseline == "last"
    assert spec(results={"store": {"claimName": "runs"}}).run_config("q").store == contract.STORE_MOUNT_PATH
    assert spec().run_config("q").store is None


def runner_env(benchmark: BatchBenchmarkSpec) -> dict[str, dict[str, Any]]:
    """The runner container's variables by name (each named once)."""
    env = pod_spec(children.job(OWNER, benchmark))["containers"][0]["env"]
    names = [variable["name"] for variable in env]
    assert len(names) == len(set(names)), names
    return {variable["name"]: variable for variable in env}


def test_an_s3_store_gives_the_runner_its_bucket_endpoint_region_and_credentials_by_reference() -> None:
    benchmark = spec(results=BUCKET, baseline="last", repeats=3)
    pod = pod_spec(children.job(OWNER, benchmark))
    assert [volume["name"] for volume in pod["volumes"]] == ["config", "dshm"]
    assert [mount["name"] for mount in pod["containers"][0]["volumeMounts"]] == ["config", "dshm"]
    env = runner_env(benchmark)
    assert env["AWS_ENDPOINT_URL"] == {"name": "AWS_ENDPOINT_URL", "value": "http://minio.storage.svc:9000"}
    assert env["AWS_REGION"] == {"name": "AWS_REGION", "value": "eu-west-3"}
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "bench-s3", "key": key}}}
    token = {"name": "bench-s3", "key": "AWS_SESSION_TOKEN", "optional": True}
    assert env["AWS_SESSION_TOKEN"] == {"name": "AWS_SESSION_TOKEN", "valueFrom": {"secretKeyRef": token}}
    config = benchmark.run_config("qwen3")
    assert config.store == "s3://bench-runs/team-a/nightly"
    assert config.baseline == "last"
    # The config map holds the URL only: nothing secret goes through the operator.
    assert "s3://bench-runs/team-a/nightly" in children.config_map(OWNER, config)["data"][contract.CONFIG_KEY]


def test_an_s3_store_without_endpoint_region_or_secret_leaves_them_to_aws_and_the_pods_identity() -> None:
    benchmark = spec(results={"store": {"url": "s3://bench-runs"}})
    assert benchmark.run_config("q").store == "s3://bench-runs"
    assert not [name for name in runner_env(benchmark) if name.startswith("AWS_")]
    # A PVC store gives no AWS variable either.
    assert not [name for name in runner_env(spec(results=STORE)) if name.startswith("AWS_")]
    # The user's own credentials (e.g. from a Secret of their own) with a store that names none: theirs, once.
    own = {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "id"}}}
    assert runner_env(spec(results={"store": {"url": "s3://bench-runs"}}, env=[own]))["AWS_ACCESS_KEY_ID"] == own


def store(**fields: Any) -> dict[str, Any]:
    return {"results": {"store": fields}}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"baseline": "last"}, "spec.baseline: the baseline is a run in a results store"),
        ({"results": {"store": {"claimName": "runs", "path": "/abs"}}}, "relative path inside the claim"),
        ({"results": {"store": {"claimName": "runs", "path": "a/../../b"}}}, "without '..'"),
        ({"results": STORE, "parallelism": {"replicas": 2}}, "a benchmark over several pods cannot keep its runs"),
        ({"results": BUCKET, "parallelism": {"replicas": 2}}, "a benchmark over several pods cannot keep its runs"),
        (store(), r"results.store\n.*give one of claimName \(a PersistentVolumeClaim\) or url"),
        (store(claimName="runs", url="s3://bench-runs"), r"results.store\n.*give one of claimName"),
        (store(url="s3://bench-runs", path="nightly"), r"results.store\n.*path is the store's folder in claimName"),
        (store(claimName="runs", region="eu-west-3"), r"results.store\n.*region: only with url"),
        (
            store(claimName="runs", endpoint="http://minio:9000", credentialsSecret="s"),
            r"results.store\n.*endpoint, credentialsSecret: only with url",
        ),
        # The runner's own refusals (batchmark.runner.config.store), word for word.
        (store(url="s3://Bench/x"), r"results.store.url\n.*'Bench' is not a bucket's name"),
        (store(url="s3://ab"), r"results.store.url\n.*a bucket's name is 3 to 63 characters long"),
        (store(url="s3://minio:9000/bench"), r"results.store.url\n.*names a bucket, not a server"),
        (store(url="s3://key:secret@bench"), r"results.store.url\n.*carries no credentials"),
        (store(url="s3://bench/a//b"), r"results.store.url\n.*an empty, '.' or '..' part"),
        (store(url="s3://bench?x=1"), r"results.store.url\n.*takes no query"),
        (store(url="gs://bench/x"), r"results.store.url\n.*gs:// stores are not supported"),
        (store(url="/var/runs"), r"results.store.url\n.*is not an S3 bucket: give s3://BUCKET"),
        (store(url="s3://bench", endpoint="ftp://minio"), r"results.store.endpoint\n.*is not the URL of an S3"),
        (store(url="s3://bench", endpoint="http://minio:9000/x"), r"results.store.endpoint\n.*only the scheme"),
        (store(url="s3://bench", endpoint="http://minio:port"), r"results.store.endpoint\n.*is not the URL of an S3"),
        (store(url="s3://bench", endpoint=" "), r"results.store.endpoint\n.*names no S3 server"),
        (store(url="s3://bench", region="eu west"), r"results.store.region\n"),
        (store(url="s3://bench", credentialsSecret="S3_Creds"), r"results.store.credentialsSecret\n"),
    ],
    ids=[
        "a baseline without a store",
        "an absolute path",
        "a path out of the claim",
        "several pods",
        "several pods, a bucket",
        "neither claim nor bucket",
        "both claim and bucket",
        "a path in a bucket",
        "a region with a claim",
        "an endpoint and a Secret with a claim",
        "a bucket in capitals",
        "a bucket too short",
        "a server for a bucket",
        "credentials in the URL",
        "an empty part of the prefix",
        "a query",
        "another scheme",
        "a folder",
        "an endpoint of another scheme",
        "an endpoint with a path",
        "an endpoint with no port number",
        "a blank endpoint",
        "a region with a space",
        "a Secret name in capitals",
    ],
)
def test_refusals(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**changes)


@pytest.mark.parametrize(
    ("fields", "variable", "field"),
    [
        ({"endpoint": "http://minio:9000"}, "AWS_ENDPOINT_URL", "endpoint"),
        ({"endpoint": "http://minio:9000"}, "AWS_ENDPOINT_URL_S3", "endpoint"),  # the runner reads it first
        ({"endpoint": "http://minio:9000"}, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "endpoint"),
        ({"region": "eu-west-3"}, "AWS_REGION", "region"),
        ({"region": "eu-west-3"}, "AWS_DEFAULT_REGION", "region"),  # the AWS SDK reads it first
        ({"credentialsSecret": "bench-s3"}, "AWS_ACCESS_KEY_ID", "credentialsSecret"),
        ({"credentialsSecret": "bench-s3"}, "AWS_SECRET_ACCESS_KEY", "credentialsSecret"),
        ({"credentialsSecret": "bench-s3"}, "AWS_SESSION_TOKEN", "credentialsSecret"),
    ],
)
def test_the_specs_env_cannot_contradict_the_store(fields: dict[str, str], variable: str, field: str) -> None:
    env = [{"name": "LOG_LEVEL", "value": "debug"}, {"name": variable, "value": "x"}]
    with pytest.raises(ValueError, match=rf"spec.env\[1\]: {variable} would contradict spec.results.store.{field},"):
        spec(results={"store": {"url": "s3://bench", **fields}}, env=env)
    # What the store leaves unsaid, the user's env may say.
    spec(results={"store": {"url": "s3://bench"}}, env=env)


def regressed_condition(status: dict[str, Any], finished: bool) -> dict[str, Any]:
    if finished:
        observed = (job(succeeded=1, complete=True), [pod("Succeeded", node="n")], {"phase": "Running", **status})
    else:
        observed = (job(active=1), [pod("Running", node="n")], {"progress": {"podName": "bb-1"}, **status})
    observation = Observation(
        generation=1, cancel=False, status=observed[2], job=observed[0], pods=observed[1], baseline=True
    )
    fields = build_status(observation).fields
    return next(condition for condition in fields["conditions"] if condition["type"] == "Regressed")


VERDICT = {
    "verdict": "True",
    "baseline": "3f2a",
    "change": -0.2,
    "changeLow": -0.25,
    "changeHigh": -0.15,
    "pValue": 0.001,
    "threshold": 0.05,
    "reason": "throughputx32: output tokens/s -20.0% (...)",
}


def test_the_regressed_condition_is_the_runners_verdict() -> None:
    waiting = regressed_condition({}, finished=False)
    assert (waiting["status"], waiting["reason"]) == ("Unknown", "Waiting")
    told = regressed_condition({"regression": VERDICT}, finished=True)
    assert (told["status"], told["reason"], told["message"]) == ("True", "Regressed", VERDICT["reason"])
    equal = regressed_condition({"regression": {**VERDICT, "verdict": "False", "reason": "no"}}, finished=True)
    assert (equal["status"], equal["reason"]) == ("False", "NotRegressed")
    unknown = regressed_condition({"regression": {**VERDICT, "verdict": "Unknown"}}, finished=True)
    assert (unknown["status"], unknown["reason"]) == ("Unknown", "NoVerdict")
    silent = regressed_condition({}, finished=True)
    assert (silent["status"], silent["reason"]) == ("Unknown", "NoVerdict")
    garbled = regressed_condition({"regression": {"verdict": "maybe"}}, finished=True)
    assert garbled["status"] == "Unknown"


def test_without_a_baseline_there_is_no_regressed_condition() -> None:
    observation = Observation(generation=1, cancel=False, status={}, job=None, pods=[])
    assert "Regressed" not in {condition["type"] for condition in build_status(observation).fields["conditions"]}


def test_the_regressed_series_follows_the_verdict_and_goes_with_the_resource() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    labels = {"namespace": "team-a", "name": "nightly", "baseline": "3f2a"}
    metrics.set_regression("team-a", "nightly", VERDICT)
    assert registry.get_sample_value("batchmark_operator_benchmark_regressed", labels) == 1
    metrics.set_regression("team-a", "nightly", {**VERDICT, "verdict": "False"})
    assert registry.get_sample_value("batchmark_operator_benchmark_regressed", labels) == 0
    metrics.set_regression("team-a", "nightly", {**VERDICT, "verdict": "Unknown"})
    assert registry.get_sample_value("batchmark_operator_benchmark_regressed", labels) is None
    metrics.set_regression("team-a", "nightly", VERDICT)
    metrics.forget("team-a", "nightly")
    assert registry.get_sample_value("batchmark_operator_benchmark_regressed", labels) is None


def test_the_spec_model_names_both_fields() -> None:
    fields = BatchBenchmarkSpec.model_fields
    assert fields["baseline"].description
    assert fields["results"].description


def test_the_operators_default_store_is_given_to_one_pod_benchmarks_only() -> None:
    defaults = OperatorDefaults.model_validate({"results": {"store": {"claimName": "shared", "path": "all"}}})
    one_pod = defaults.apply(spec())
    assert one_pod.results is not None
    assert one_pod.run_config("a").store == f"{contract.STORE_MOUNT_PATH}/all"
    own = defaults.apply(spec(results=STORE))
    assert own.run_config("a").store == f"{contract.STORE_MOUNT_PATH}/team-a/nightly"
    several = defaults.apply(spec(parallelism={"replicas": 2}, backend={**spec().backend.model_dump(by_alias=True)}))
    assert several.results is None
    assert several.run_config("a").store is None


def test_the_operators_default_store_may_be_a_bucket() -> None:
    defaults = OperatorDefaults.model_validate(BUCKET_DEFAULTS)
    given = defaults.apply(spec())
    assert given.run_config("a").store == "s3://team-runs/all"
    env = runner_env(given)
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://s3.example.com"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "runs-s3", "key": "AWS_ACCESS_KEY_ID"}
    # A spec that names its own store keeps it, and its env then only has to agree with that one.
    own = defaults.apply(spec(results=STORE, env=[{"name": "AWS_ENDPOINT_URL", "value": "http://elsewhere:9000"}]))
    assert own.run_config("a").store == f"{contract.STORE_MOUNT_PATH}/team-a/nightly"
    # The default store's variables against the spec's own: refused (InvalidConfig), naming both.
    with pytest.raises(ValueError, match=r"spec.env\[0\]: AWS_ENDPOINT_URL would contradict .*benchmarkDefaults"):
        defaults.apply(spec(env=[{"name": "AWS_ENDPOINT_URL", "value": "http://elsewhere:9000"}]))
    # A benchmark over several pods gets no default store, so its env is its own.
    several = spec(parallelism={"replicas": 2}, env=[{"name": "AWS_ENDPOINT_URL", "value": "http://elsewhere:9000"}])
    assert defaults.apply(several).results is None


def test_every_field_of_the_store_is_described() -> None:
    for name, field in ResultsStore.model_fields.items():
        assert field.description, name
