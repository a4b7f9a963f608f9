"""spec.parallelism: engine replicas in one pod (a Job, backend.replicas in each pod) or over several (a JobSet):
what is refused, the JobSet made, and the phase of a benchmark that is only as far as its slowest pod."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from batchmark.operator.controller import children
from batchmark.operator.controller.jobset import JOB_INDEX_LABEL, JOBSET_UID_LABEL
from batchmark.operator.controller.reconcile import _describe, _pods_of, _replicas_of
from batchmark.operator.controller.status import JobView, Observation, PodView, build_status
from batchmark.operator.resource.status import Phase, Reason
from batchmark.runner import contract
from tests.unit.operator.test_children import BENCHMARK, OWNER, spec

SIMULATED = {**BENCHMARK, "backend": {**BENCHMARK["backend"], "engine": "simulated"}}
T0 = "2026-01-01T00:00:00Z"


def refusal(**changes: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        spec(**changes)
    return _describe(refused.value)


def test_bad_parallelism_is_refused_with_its_field_named() -> None:
    assert "spec.parallelism.replicas" in refusal(parallelism={"replicas": 0})
    assert "spec.parallelism.replicasPerPod" in refusal(parallelism={"replicas": 4, "replicasPerPod": 65})
    uneven = refusal(parallelism={"replicas": 3, "replicasPerPod": 2})
    assert uneven.startswith("spec.parallelism: ")
    assert "replicasPerPod (2) does not divide replicas (3)" in uneven
    assert "above the 256 one benchmark may span" in refusal(parallelism={"replicas": 257})
    both = refusal(parallelism={"replicas": 2}, backend={**BENCHMARK["backend"], "replicas": 2})
    assert both.startswith("Value error, spec.backend.replicas: give the replicas in spec.parallelism")
    few = refusal(
        parallelism={"replicas": 8, "replicasPerPod": 4},
        backend={**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": 2}},
        resources={"limits": {"nvidia.com/gpu": 4}},
    )
    assert "spec.resources.limits.nvidia.com/gpu (4) is too few for spec.parallelism.replicasPerPod (4)" in few
    assert "give 8" in few
    pushed = refusal(parallelism={"replicas": 2}, metrics={"pushgateway": "http://pushgateway:9091"})
    assert pushed.startswith("Value error, spec.metrics.pushgateway: a benchmark over several pods pushes no")
    beyond = refusal(parallelism={"replicas": 4, "replicasPerPod": 2}, sweep={"replicas": [1, 4]})
    assert "spec.sweep.replicas goes up to 4, above spec.parallelism.replicasPerPod (2)" in beyond


def test_replicas_in_one_pod_are_a_job_whose_runner_runs_them_all() -> None:
    one_pod = spec(
        parallelism={"replicas": 4, "replicasPerPod": 4},
        backend={**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": 2}},
    )
    assert one_pod.pods == 1
    assert one_pod.run_config("qwen3").backend.replicas == 4
    manifest = children.workload(OWNER, one_pod)
    assert manifest["kind"] == "Job"
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # 4 replicas of TP 2
    assert not {contract.ENV_MEMBER, contract.ENV_MEMBERS} & {variable["name"] for variable in container["env"]}


def test_replicas_over_several_pods_are_one_jobset_all_or_nothing() -> None:
    fleet = spec(parallelism={"replicas": 6, "replicasPerPod": 2}, retries=1, queueName="gpus")
    assert fleet.pods == 3
    assert fleet.run_config("qwen3").backend.replicas == 2
    manifest = children.workload(OWNER, fleet, "high")
    assert (manifest["apiVersion"], manifest["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert manifest["metadata"]["name"] == "qwen3"
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpus"  # Kueue admits it whole
    jobset_spec = manifest["spec"]
    assert jobset_spec["suspend"] is True
    # Restarted whole on a failure that may go otherwise next time; not on a refused configuration, nor a failed
    # results store: the failed Job's pod failure policy says which, and JobSet fails instead of restarting.
    assert jobset_spec["failurePolicy"] == {
        "maxRestarts": 1,
        "rules": [{"name": "NotRetried", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }
    assert jobset_spec["successPolicy"] == {"operator": "All"}
    assert jobset_spec["network"]["enableDNSHostnames"] is True
    [replicated] = jobset_spec["replicatedJobs"]
    assert (replicated["name"], replicated["replicas"]) == ("runner", 3)
    job_spec = replicated["template"]["spec"]
    assert (job_spec["completions"], job_spec["parallelism"], job_spec["backoffLimit"]) == (1, 1, 0)
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["podFailurePolicy"] == children.job(OWNER, fleet)["spec"]["podFailurePolicy"]
    pod = job_spec["template"]["spec"]
    assert pod["serviceAccountName"] == OWNER.runner
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"  # each pod's two replicas, one GPU each
    env = {variable["name"]: variable for variable in container["env"]}
    assert env[contract.ENV_MEMBERS]["value"] == "3"
    assert (
        env[contract.ENV_MEMBER]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{JOB_INDEX_LABEL}']"
    )
    assert env[contract.ENV_LEADER]["value"] == "qwen3-runner-0-0.qwen3"
    assert {"name": "member-reports", "containerPort": contract.MEMBER_REPORT_PORT, "protocol": "TCP"} in container[
        "ports"
    ]


def test_an_engine_over_several_pods_is_refused_where_it_cannot_work() -> None:
    tp2 = {**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": 2}}
    assert "spec.parallelism.nodesPerReplica" in refusal(parallelism={"nodesPerReplica": 17}, backend=tp2)
    packed = refusal(parallelism={"replicas": 2, "replicasPerPod": 2, "nodesPerReplica": 2}, backend=tp2)
    assert "nodesPerReplica (2) spans each replica over several pods" in packed
    assert "leave replicasPerPod 1" in packed
    simulated = refusal(parallelism={"nodesPerReplica": 2}, backend={**tp2, "engine": "simulated"})
    assert "spec.parallelism.nodesPerReplica (2): engine simulated runs in one pod" in simulated
    uneven = refusal(parallelism={"nodesPerReplica": 2}, backend=BENCHMARK["backend"])
    assert "spec.parallelism.nodesPerReplica (2) does not divide tensor_parallel_size x pipeline_parallel_size (1)" in (
        uneven
    )
    ours = refusal(
        parallelism={"nodesPerReplica": 2},
        backend={**tp2, "vllmConfig": {"tensor_parallel_size": 2, "master_addr": "elsewhere"}},
    )
    assert "spec.backend.vllmConfig.master_addr: with spec.parallelism.nodesPerReplica (2)" in ours
    ray = refusal(
        parallelism={"nodesPerReplica": 2},
        backend={**tp2, "vllmConfig": {"tensor_parallel_size": 2, "distributed_executor_backend": "ray"}},
    )
    assert "spec.backend.vllmConfig.distributed_executor_backend: 'ray' with spec.parallelism.nodesPerReplica" in ray
    reloads = refusal(parallelism={"nodesPerReplica": 2}, backend=tp2, sweep={"vllmConfig": {"max_num_seqs": [8, 16]}})
    assert "spec.sweep.vllm_config.max_num_seqs: a sweep that reloads the engine cannot run with" in reloads
    few = refusal(
        parallelism={"nodesPerReplica": 2},
        backend={**tp2, "vllmConfig": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}},
        resources={"limits": {"nvidia.com/gpu": 4}},
    )
    assert "(4) is too few for one pod of an engine over 2 pods" in few
    assert "give 8" in few
    # A sweep that leaves the engine alone is fine.
    assert spec(parallelism={"nodesPerReplica": 2}, backend=tp2, sweep={"batchSize": [4, 8]}).pods == 2


def test_an_engine_over_two_pods_is_a_jobset_whose_pods_know_their_place_in_it() -> None:
    backend = {**BENCHMARK["backend"], "vllmConfig": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}}
    two_nodes = spec(parallelism={"replicas": 2, "nodesPerReplica": 2}, backend=backend)
    assert (two_nodes.pods, two_nodes.engine_nodes) == (4, 2)
    assert two_nodes.run_config("qwen3").backend.replicas == 1
    manifest = children.workload(OWNER, two_nodes)
    assert manifest["kind"] == "JobSet"
    [replicated] = manifest["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 4  # a Job of one pod for each node of each replica
    [container] = replicated["template"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # TP 8 x PP 2 over 2 nodes
    env = {variable["name"]: variable for variable in container["env"]}
    assert env[contract.ENV_MEMBERS]["value"] == "4"
    assert env[contract.ENV_ENGINE_NODES]["value"] == "2"
    assert env[contract.ENV_MEMBER_ADDRESS]["value"] == "qwen3-runner-{member}-0.qwen3"
    assert env["VLLM_HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["engine-nodes"] == contract.ENGINE_RENDEZVOUS_PORT
    # Without nodesPerReplica, none of it.
    fleet = children.workload(OWNER, spec(parallelism={"replicas": 2}))
    [replicated] = fleet["spec"]["replicatedJobs"]
    [container] = replicated["template"]["spec"]["template"]["spec"]["containers"]
    assert not {contract.ENV_ENGINE_NODES, contract.ENV_MEMBER_ADDRESS} & {
        variable["name"] for variable in container["env"]
    }


def test_the_pods_of_a_stored_spec_count_each_engine_s_nodes() -> None:
    assert _pods_of({}) == 1
    assert _pods_of({"parallelism": {"replicas": 6, "replicasPerPod": 2}}) == 3
    assert _pods_of({"parallelism": {"replicas": 2, "nodesPerReplica": 2}}) == 4
    assert _pods_of({"parallelism": {"replicas": 3, "replicasPerPod": 2}}) == 1  # refused: one pod, no JobSet
    assert _pods_of({"parallelism": {"nodesPerReplica": "two"}}) == 1


def jobset(**status: Any) -> JobView:
    conditions = [
        {"type": kind, "status": "True", "reason": status.pop("reason", kind), "message": status.pop("message", "")}
        for kind in status.pop("conditions", [])
    ]
    return JobView.from_jobset(
        {
            "metadata": {"name": "bb", "uid": "js-uid", "creationTimestamp": T0},
            "spec": {"replicatedJobs": [{"name": "runner", "replicas": 3}], "failurePolicy": {"maxRestarts": 0}},
            "status": {"replicatedJobsStatus": [{"name": "runner", **status}], "conditions": conditions},
        }
    )


def member(
    index: int, phase: str = "Running", node: str | None = "n1", deleting: bool = False, **container: Any
) -> PodView:
    status: dict[str, Any] = {"phase": phase}
    if container:
        status["containerStatuses"] = [{"name": "runner", "state": container}]
    return PodView.from_dict(
        {
            "metadata": {
                "name": f"bb-runner-{index}-0-x",
                "creationTimestamp": T0,
                "labels": {JOBSET_UID_LABEL: "js-uid", JOB_INDEX_LABEL: str(index)},
                **({"deletionTimestamp": T0} if deleting else {}),
            },
            "spec": {"nodeName": node} if node else {},
            "status": status,
        }
    )


def phase_of(job: JobView, pods: list[PodView], **stored: Any) -> tuple[Phase, str, str, dict[str, Any]]:
    update = build_status(Observation(generation=1, cancel=False, status=stored, job=job, pods=pods), T0)
    return update.phase, update.reason, update.message, update.fields


def test_the_benchmark_is_as_far_as_its_slowest_pod() -> None:
    running = jobset(active=3)
    assert all(running.owns(member(index)) for index in range(3))
    assert running.members == 3
    # One pod waits for a node: the benchmark is Scheduling, whatever the others do.
    phase, _, _, fields = phase_of(running, [member(0), member(1, "Pending", None), member(2)])
    assert phase == Phase.SCHEDULING
    assert fields["podName"] == "bb-runner-1-0-x"
    # All run, pod 0's runner reports the progress: Running.
    progress = {"progress": {"podName": "bb-runner-0-0-x"}}
    phase, _, _, fields = phase_of(running, [member(0), member(1), member(2)], **progress)
    assert phase == Phase.RUNNING
    assert fields["attempts"] == 1  # one run of the whole group, not three
    # A pod not made yet (its Job has not created it) keeps it from Running.
    phase, _, _, _ = phase_of(running, [member(0), member(1)], **progress)
    assert phase == Phase.SCHEDULING
    # Every pod done, the JobSet Completed: Succeeded.
    done = jobset(succeeded=3, conditions=["Completed"])
    assert phase_of(done, [member(index, "Succeeded") for index in range(3)], **progress)[0] == Phase.SUCCEEDED


def test_a_pod_that_failed_fails_the_benchmark_naming_the_pod() -> None:
    failed = jobset(active=0, failed=1, conditions=["Failed"], reason="FailedJobs", message="jobset failed")
    # Pod 1 was killed; JobSet then stopped the others, deleting their Jobs.
    killed = member(1, "Failed", terminated={"exitCode": 137, "reason": "Error"})
    stopped = [member(index, "Failed", deleting=True, terminated={"exitCode": 143}) for index in (0, 2)]
    phase, reason, message, _ = phase_of(failed, [stopped[0], killed, stopped[1]])
    assert (phase, reason) == (Phase.FAILED, Reason.POD_FAILED)
    assert message == (
        "pod 1 of 3 (bb-runner-1-0-x on n1) failed with exit code 137, and its JobSet stopped the others"
        " (FailedJobs: jobset failed)"
    )
    # The pod that failed first was deleted: JobSet's message still names its Job.
    gone = jobset(
        failed=1,
        conditions=["Failed"],
        reason="ReachedMaxRestarts",
        message="jobset failed due to reaching max number of restarts (first failed job: bb-runner-2)",
    )
    phase, reason, message, _ = phase_of(gone, [stopped[0], member(1, "Failed", deleting=True)])
    assert (phase, reason) == (Phase.FAILED, Reason.POD_FAILED)
    assert message.startswith("pod 2 of 3 (its Job bb-runner-2) failed and is gone, and its JobSet stopped the others")
    oom = member(1, "Failed", terminated={"exitCode": 137, "reason": "OOMKilled"})
    phase, reason, message, _ = phase_of(failed, [member(0), oom, member(2)])
    assert (phase, reason) == (Phase.FAILED, Reason.OOM_KILLED)
    assert message.startswith("pod 1 of 3 (bb-runner-1-0-x on n1): the runner ran out of memory")


def test_a_pod_whose_exit_its_job_is_not_retried_on_fails_the_benchmark_before_the_jobset_says_so() -> None:
    running = jobset(active=2, failed=1)
    refused = member(1, "Failed", terminated={"exitCode": contract.EXIT_USAGE, "reason": "Error"})
    phase, reason, message, fields = phase_of(running, [member(0), refused, member(2)], phase="Running", attempts=1)
    assert (phase, reason) == (Phase.FAILED, Reason.INVALID_CONFIG)
    assert message.startswith("pod 1 of 3 (bb-runner-1-0-x on n1): ")
    assert fields["attempts"] == 1


def test_the_status_says_how_many_replicas_for_the_replicas_column() -> None:
    assert _replicas_of({"parallelism": {"replicas": 6, "replicasPerPod": 2}, "backend": {"replicas": 1}}) == 6
    assert _replicas_of({"backend": {"replicas": 4}}) == 4
    assert _replicas_of({"backend": {}}) == 1
    assert _replicas_of({"parallelism": {"replicas": "six"}}) is None
    observation = Observation(generation=1, cancel=False, status={}, job=jobset(active=3), replicas=6)
    assert build_status(observation, T0).fields["replicas"] == 6
