"""spec.results.store and spec.baseline: the claim mounted for the runner's store, the run's config naming it, the
refusals, and the Regressed condition and series from the runner's verdict."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from batchmark.operator.controller import children
from batchmark.operator.controller.metrics import OperatorMetrics
from batchmark.operator.controller.status import Observation, build_status
from batchmark.operator.resource.api import BatchBenchmarkSpec, OperatorDefaults
from batchmark.runner import contract
from tests.unit.operator.test_children import OWNER, pod_spec, spec
from tests.unit.operator.test_status import job, pod

STORE = {"store": {"claimName": "runs", "path": "team-a/nightly"}}


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


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"baseline": "last"}, "spec.baseline: the baseline is a run in a results store"),
        ({"results": {"store": {"claimName": "runs", "path": "/abs"}}}, "relative path inside the claim"),
        ({"results": {"store": {"claimName": "runs", "path": "a/../../b"}}}, "without '..'"),
        ({"results": STORE, "parallelism": {"replicas": 2}}, "a benchmark over several pods cannot keep its runs"),
    ],
    ids=["a baseline without a store", "an absolute path", "a path out of the claim", "several pods"],
)
def test_refusals(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**changes)


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
