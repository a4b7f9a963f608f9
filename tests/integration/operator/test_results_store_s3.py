"""spec.results.store naming an S3-compatible bucket, on real kubelets over containerd: benchmarks keep their runs
in a real S3 server (SeaweedFS, on this machine at the pod network's gateway, where the pods reach it) with the
credentials of a Secret, a later run is judged against the one before from the bucket, the runs are listed from
the bucket with `batchmark history`, and a Secret with the wrong credentials fails the benchmark before any work
(the runner's pre-run probe: exit 2, InvalidConfig, naming --store), all in the runner image as built."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs
import pytest
from kubernetes.client import BatchV1Api, CoreV1Api, V1ObjectMeta, V1Secret

from devtools.s3server import REGION, S3Server, s3_server
from tests.cli import run_in_process
from tests.cluster_fixtures import KubeCluster
from tests.integration.cluster.benchmark_pods import apply_stepped_benchmark, assert_succeeds_with_results
from tests.integration.operator.conftest import wait_for_phase
from tests.integration.operator.installed import InstalledOperator
from tests.integration.runner.s3_fixtures import required_weed, use_only_store

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.images]

BUCKET = "batchmark-nightly"
PREFIX = "nightly"
STORE_URL = f"s3://{BUCKET}/{PREFIX}"
CREDENTIALS = "nightly-s3"
WRONG_CREDENTIALS = "nightly-s3-wrong"
WHOLE_RUN = {"results.json", "report.html", "config.yaml", "fingerprint.json"}


@pytest.fixture
def bucket_server(container_cluster: KubeCluster, container_namespace: str) -> Iterator[S3Server]:
    """A SeaweedFS S3 server with the bucket, listening on the pod network's gateway (this machine as the pods
    reach it), and two Secrets in the test's namespace: its credentials, and its access key with a wrong secret.
    The benchmarks go before the server does."""
    gateway = container_cluster.pod_network.gateway
    with s3_server(bucket=BUCKET, binary=required_weed(), address=gateway) as server:
        create_credentials(container_cluster, container_namespace, server)
        try:
            yield server
        finally:
            container_cluster.kubectl(
                "delete", "bb", "--all", "-n", container_namespace, "--wait", "--timeout=120s", check=False
            )


def create_credentials(cluster: KubeCluster, namespace: str, server: S3Server) -> None:
    """The Secrets CREDENTIALS (the server's keys) and WRONG_CREDENTIALS (its access key, a wrong secret)."""
    core = CoreV1Api(cluster.api_client())
    for name, secret_key in ((CREDENTIALS, server.secret_key), (WRONG_CREDENTIALS, "not-the-" + server.secret_key)):
        keys = {"AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
        core.create_namespaced_secret(namespace, V1Secret(metadata=V1ObjectMeta(name=name), string_data=keys))


def bucket_benchmark(
    cluster: KubeCluster, namespace: str, name: str, server: S3Server, credentials: str = CREDENTIALS, **spec: Any
) -> None:
    """A short stepped benchmark (10 ms steps) kept in the bucket under nightly/ with the credentials of the Secret
    ``credentials``."""
    store = {"url": STORE_URL, "endpoint": server.endpoint, "region": REGION, "credentialsSecret": credentials}
    apply_stepped_benchmark(cluster, namespace, name, 0.01, {"store": store}, **spec)


def stored_objects(server: S3Server) -> list[str]:
    """Every object under the store's prefix, relative to it."""
    root = f"{BUCKET}/{PREFIX}"
    infos = server.filesystem().get_file_info(pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True))
    return sorted(info.path.removeprefix(root + "/") for info in infos if info.type == pyarrow.fs.FileType.File)


def test_runs_are_kept_in_an_s3_bucket_with_a_secrets_credentials_and_wrong_ones_fail_at_once(
    batchmark_operator: InstalledOperator,
    bucket_server: S3Server,
    container_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    cluster, namespace, server = batchmark_operator.cluster, container_namespace, bucket_server
    bucket_benchmark(cluster, namespace, "first", server)
    first = assert_succeeds_with_results(cluster, namespace, "first")
    # The pod had the bucket's endpoint and region, and the Secret's keys by reference: no volume for the store.
    job = BatchV1Api(cluster.api_client()).read_namespaced_job("first", namespace).to_dict()
    pod = job["spec"]["template"]["spec"]
    env = {variable["name"]: variable for variable in pod["containers"][0]["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == server.endpoint
    assert env["AWS_REGION"]["value"] == REGION
    reference = env["AWS_SECRET_ACCESS_KEY"]["value_from"]["secret_key_ref"]
    assert (reference["name"], reference["key"]) == (CREDENTIALS, "AWS_SECRET_ACCESS_KEY")
    assert env["AWS_SESSION_TOKEN"]["value_from"]["secret_key_ref"]["optional"] is True
    assert "results-store" not in {volume["name"] for volume in pod["volumes"]}

    bucket_benchmark(cluster, namespace, "equal", server, baseline="last")
    equal = assert_succeeds_with_results(cluster, namespace, "equal")["status"]
    assert equal["regression"]["baseline"] == first["status"]["runId"]
    assert equal["regression"]["verdict"] == "False", equal["regression"]
    regressed = next(condition for condition in equal["conditions"] if condition["type"] == "Regressed")
    assert (regressed["status"], regressed["reason"]) == ("False", "NotRegressed")

    # A Secret with a wrong secret key: the runner's probe of the bucket refuses the run before any work.
    bucket_benchmark(cluster, namespace, "wrong-key", server, credentials=WRONG_CREDENTIALS)
    failed = wait_for_phase(cluster, namespace, "wrong-key", {"Succeeded", "Failed"}, timeout_seconds=120)["status"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "InvalidConfig"), failed
    assert failed.get("attempts", 1) == 1, failed
    message = failed["message"]
    for said in (
        f"--store: {STORE_URL}: cannot write to the bucket",
        "SIGNATURE_DOES_NOT_MATCH",
        "check AWS_ACCESS_KEY_ID",
    ):
        assert said in message, message

    # No key shows in the benchmarks, spec or status (the runner's message included).
    for name in ("first", "equal", "wrong-key"):
        written = cluster.kubectl("get", "bb", name, "-n", namespace, "-o", "json").stdout
        assert server.secret_key not in written
        assert "not-the-" not in written

    # The resources go; their runs stay in the bucket, listed from this machine with the same credentials.
    deleted = cluster.kubectl(
        "delete", "bb", "first", "equal", "wrong-key", "-n", namespace, "--wait", "--timeout=120s"
    )
    assert deleted.returncode == 0, deleted.stderr
    use_only_store(monkeypatch, server.environment(), tmp_path)
    listed = run_in_process(["history", "--store", STORE_URL, "--format", "csv"])
    assert listed.code == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert [row.split(",")[1] for row in rows] == [first["status"]["runId"], equal["runId"]]
    assert all(",simulated,True," in row for row in rows)
    # Each run whole under its folder, and each its index entry; nothing of the refused one, nor a probe left.
    stored = stored_objects(server)
    for row in rows:
        folder = row.split(",")[-1]
        assert {path.removeprefix(folder + "/") for path in stored if path.startswith(folder + "/")} == WHOLE_RUN
    assert len([path for path in stored if path.startswith("index/")]) == 2
    assert len(stored) == 2 * len(WHOLE_RUN) + 2, stored
    assert not [path for path in stored if path.endswith(".probe")]
    results = f"{BUCKET}/{PREFIX}/{rows[0].split(',')[-1]}/results.json"
    assert json.loads(server.filesystem().open_input_stream(results).readall())["run_id"] == first["status"]["runId"]


def test_a_store_that_fails_after_the_run_fails_the_benchmark_at_once_with_its_results_in_the_status(
    batchmark_operator: InstalledOperator, container_namespace: str
) -> None:
    """The bucket answered the runner's probe, then its server went while the benchmark ran: the upload at the end
    fails, the pod exits 4, and the benchmark ends Failed (OutputFailed, with the store's error) at its first
    attempt though it had a retry, with the run's results in its status."""
    cluster, namespace = batchmark_operator.cluster, container_namespace
    with s3_server(bucket=BUCKET, binary=required_weed(), address=cluster.pod_network.gateway) as server:
        create_credentials(cluster, namespace, server)
        # 0.1 s steps: about 20 s of run after the engine loads, time enough to stop the server mid-run.
        store = {"url": STORE_URL, "endpoint": server.endpoint, "region": REGION, "credentialsSecret": CREDENTIALS}
        apply_stepped_benchmark(cluster, namespace, "server-gone", 0.1, {"store": store}, retries=1)
        running = wait_for_phase(cluster, namespace, "server-gone", {"Running", "Succeeded", "Failed"})
        assert running["status"]["phase"] == "Running", running["status"]
    ended = wait_for_phase(cluster, namespace, "server-gone", {"Succeeded", "Failed"}, timeout_seconds=180)["status"]
    assert (ended["phase"], ended["reason"]) == ("Failed", "OutputFailed"), ended
    assert ended["message"].startswith("the run ended and its results are in the status, but --store: "), ended
    assert STORE_URL in ended["message"]
    assert ended.get("attempts", 1) == 1, ended
    assert ended["results"][0]["requests"]["completed"] == 64, ended
    assert ended["runId"], ended
    assert ended["resultsConfigMap"], ended
    retrying = next(condition for condition in ended["conditions"] if condition["type"] == "Retrying")
    assert retrying["status"] == "False", retrying
