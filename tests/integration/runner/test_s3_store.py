"""`batchmark run --store s3://BUCKET/PREFIX`, `history` and `compare` over a real S3 server (SeaweedFS's S3
gateway, tests/integration/runner/s3_fixtures.py): runs kept whole, their index entry last; a store that cannot
be reached or written fails the upload loudly, in seconds, and keeps the results; bad input refused in one line;
the index compacted without losing or doubling a run (the scenarios tests/unit/runner/store runs on a folder)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs
import pytest

from batchmark.runner.commands import run as run_command
from batchmark.runner.config import store as store_config
from batchmark.runner.results.outputs import write_reports
from batchmark.runner.store import results_store
from tests.cli import Finished, read_results, run_in_process
from tests.integration.runner.harness import backend, run_args, stepped_run_args
from tests.integration.runner.s3_fixtures import S3Store, s3, s3_server_of_module
from tests.unit.runner.store import compaction_scenarios as scenarios

pytestmark = pytest.mark.integration

__all__ = ["s3", "s3_server_of_module"]  # fixtures, used by name

RUN_FILES = {"results.json", "report.html", "config.yaml", "fingerprint.json"}


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def stored_run(store: S3Store, *extra: str, model: str = "org/m", outputs: tuple[Path, ...] = ()) -> Finished:
    return run_in_process(run_args(backend(model=model), outputs=list(outputs), extra=["--store", store.url, *extra]))


def listed(store: S3Store, *filters: str) -> list[dict[str, Any]]:
    finished = run_in_process(["history", "--store", store.url, "--format", "json", *filters])
    assert finished.code == 0, finished.stderr
    runs: list[dict[str, Any]] = json.loads(finished.stdout)
    return runs


def objects(store: S3Store) -> list[str]:
    """Every object under the store's prefix (not the folders pyarrow infers), relative to it."""
    infos = store.server.filesystem().get_file_info(
        pyarrow.fs.FileSelector(store.key(), recursive=True, allow_not_found=True)
    )
    return sorted(info.path.removeprefix(store.key() + "/") for info in infos if info.type == pyarrow.fs.FileType.File)


class Recording(pyarrow.fs.FileSystemHandler):  # type: ignore[misc]  # pyarrow has no type information
    """The store's S3 file system, with each object written or deleted recorded in order, and writes to paths
    that ``fail`` matches refused."""

    def __init__(self, inner: pyarrow.fs.FileSystem, fail: Callable[[str], bool] = lambda path: False) -> None:
        self.inner, self.fail, self.calls = inner, fail, list[tuple[str, str]]()

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        if self.fail(path):
            raise OSError(f"refused by the test: {path}")
        self.calls.append(("write", path))
        return self.inner.open_output_stream(path, metadata=metadata)

    def delete_file(self, path: str) -> None:
        self.calls.append(("delete", path))
        self.inner.delete_file(path)

    def get_type_name(self) -> str:
        return "recording"

    def get_file_info(self, paths: list[str]) -> Any:
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector: Any) -> Any:
        return self.inner.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.calls.append(("delete_dir", path))
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("not in a test")

    def move(self, src: str, dest: str) -> None:
        self.inner.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.inner.open_input_file(path)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_append_stream(path, metadata=metadata)

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))


def recording(monkeypatch: pytest.MonkeyPatch, fail: Callable[[str], bool] = lambda path: False) -> Recording:
    """The store's S3 file system from now on recorded (see Recording)."""
    made: list[Recording] = []
    real = store_config.s3_filesystem

    def recorded() -> pyarrow.fs.FileSystem:
        if not made:
            made.append(Recording(real(), fail))
        return pyarrow.fs.PyFileSystem(made[0])

    monkeypatch.setattr(results_store, "s3_filesystem", recorded)
    recorded()
    return made[0]


def test_runs_are_kept_whole_in_a_bucket_and_listed(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "r.json"
    calls = recording(monkeypatch).calls
    first = stored_run(s3, outputs=(output,))
    assert first.code == 0, first.stderr
    run_id = read_results(output)["run_id"]
    assert f"stored run {run_id} in {s3.url}" in first.message
    # The run's four objects, then its index entry, the one object readers list: last.
    written = [path.removeprefix(s3.key() + "/") for action, path in calls if action == "write"]
    assert [path.rpartition("/")[2] for path in written[:4]] == [
        "results.json",
        "report.html",
        "config.yaml",
        "fingerprint.json",
    ]
    assert written[4].startswith("index/")
    assert written[4].endswith(f"-{run_id}.json")
    assert len(written) == 5
    assert not [call for call in calls if call[0] != "write"]
    second = stored_run(s3, "--repeats", "2", model="org/other")
    assert second.code == 0, second.stderr

    runs = listed(s3)
    assert [run["model"] for run in runs] == ["org/m", "org/other"]
    mine = runs[0]
    assert mine["run_id"] == run_id
    assert runs[0]["fingerprint"]["key"] != runs[1]["fingerprint"]["key"]
    assert all(len(run["fingerprint"]["key"]) == 16 for run in runs)
    assert runs[1]["output_tokens_per_second_low"] is not None
    # The layout a person browses, as in a folder.
    parts = mine["folder"].split("/")
    assert parts[:3] == ["runs", "org--m", "1x-simulated_H100-class_GPU"]
    stored = objects(s3)
    assert {path.removeprefix(mine["folder"] + "/") for path in stored if path.startswith(mine["folder"])} == RUN_FILES
    assert len([path for path in stored if path.startswith("index/")]) == 2
    body = s3.server.filesystem().open_input_stream(s3.key(mine["folder"], "results.json")).readall()
    assert json.loads(body)["run_id"] == run_id
    # Filters and the table work as over a folder.
    assert [run["model"] for run in listed(s3, "--model", "org/o*")] == ["org/other"]
    table = run_in_process(["history", "--store", s3.url])
    assert table.code == 0, table.stderr
    assert "2 stored runs" in table.stdout
    assert mine["fingerprint"]["key"] in table.stdout


def repeated_run(store: S3Store, step_fixed: float, *extra: str) -> Finished:
    return run_in_process(stepped_run_args(step_fixed, "--repeats", "3", "--store", store.url, *extra))


def test_compare_and_a_baseline_over_s3(s3: S3Store) -> None:
    for step_fixed in (0.01, 0.01):
        finished = repeated_run(s3, step_fixed)
        assert finished.code == 0, finished.stderr
    # A run judged against the last stored run of its workload as it ends, every step about three times as long.
    slower = repeated_run(s3, 0.03, "--baseline", "last")
    assert slower.code == 0, slower.stderr
    base, equal, slowest = (run["run_id"] for run in listed(s3))
    assert "regressed True: throughputx32: output tokens/s -" in slower.message
    assert f"against the baseline {equal}, " in slower.message

    same = run_in_process(["compare", "--store", s3.url, "--baseline", "last", equal])
    assert same.code == 0, same.stderr
    assert same.stdout.splitlines()[-1].startswith(f"{equal} against {base} (baseline): regressed False: ")
    regressed = run_in_process(["compare", "--store", s3.url, "--baseline", base[:8], slowest])
    assert regressed.code == 6, regressed.stderr
    assert regressed.stdout.splitlines()[-1].startswith(f"{slowest} against {base} (baseline): regressed True: ")
    missing = run_in_process(["compare", "--store", s3.url, "--baseline", "nothere", equal])
    assert missing.code == 2
    assert f"'nothere' is not a run in the store {s3.url}" in missing.message


@pytest.fixture
def credentials_change_after_the_outputs(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, str]], None]:
    """The store's check passes before the run; then, as the run's outputs are written, before its upload, the
    environment changes (credentials rotated, the server gone)."""

    def change(variables: dict[str, str]) -> None:
        real = write_reports

        def written_then_changed(*args: Any, **kwargs: Any) -> Any:
            failures = real(*args, **kwargs)
            for name, value in variables.items():
                monkeypatch.setenv(name, value)
            return failures

        monkeypatch.setattr(run_command, "write_reports", written_then_changed)  # as _finish calls it

    return change


def assert_upload_failed(finished: Finished, output: Path, store: S3Store, *named: str) -> None:
    assert finished.code == 4, finished.stderr
    assert f"--store: cannot store the run in {store.url}: " in finished.message
    assert "the results files are unaffected" in finished.message
    for text in named:
        assert text in finished.message, finished.message
    assert "Traceback" not in finished.message
    assert [line for line in finished.stderr.splitlines() if "--store" in line] == [
        line for line in finished.stderr.splitlines() if line.startswith("batchmark run: error: --store")
    ]
    assert read_results(output)["complete"] is True
    assert objects(store) == [], "a run, or part of one, was left in the store"


def test_bad_credentials_fail_the_upload_and_keep_the_results(
    s3: S3Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    credentials_change_after_the_outputs: Callable[[dict[str, str]], None],
) -> None:
    credentials_change_after_the_outputs({"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    output = tmp_path / "r.json"
    finished = stored_run(s3, outputs=(output,))
    # The first request, a HEAD, is refused without a body: SeaweedFS says only ACCESS_DENIED.
    assert_upload_failed(finished, output, s3, "ACCESS_DENIED", "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.server.secret_key)
    assert listed(s3) == []


def closed_port() -> int:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        return int(held.getsockname()[1])


def test_an_unreachable_endpoint_fails_the_upload_in_seconds(
    s3: S3Store, tmp_path: Path, credentials_change_after_the_outputs: Callable[[dict[str, str]], None]
) -> None:
    credentials_change_after_the_outputs({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"})
    output = tmp_path / "r.json"
    started = time.monotonic()
    finished = stored_run(s3, outputs=(output,))
    assert time.monotonic() - started < 15
    assert_upload_failed(finished, output, s3, "NETWORK_CONNECTION", "check AWS_ENDPOINT_URL")


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        yield int(server.getsockname()[1])
        stop.set()
        thread.join()
        for connection in accepted:
            connection.close()


def test_a_server_that_never_answers_fails_the_upload_at_the_request_timeout(
    s3: S3Store,
    tmp_path: Path,
    silent_server: int,
    monkeypatch: pytest.MonkeyPatch,
    credentials_change_after_the_outputs: Callable[[dict[str, str]], None],
) -> None:
    """The request timeout (15 s, three attempts) shortened to 1 s: what matters is that it applies."""
    monkeypatch.setattr(store_config, "S3_REQUEST_TIMEOUT", 1.0)
    credentials_change_after_the_outputs({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent_server}"})
    output = tmp_path / "r.json"
    started = time.monotonic()
    finished = stored_run(s3, outputs=(output,))
    assert time.monotonic() - started < 20
    assert_upload_failed(finished, output, s3, "Timeout was reached")


def test_an_upload_that_fails_half_way_leaves_no_run(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's objects are put, its index entry is refused: the run's folder is deleted, and no reader sees a
    run."""
    calls = recording(monkeypatch, fail=lambda path: "/index/" in path).calls
    output = tmp_path / "r.json"
    finished = stored_run(s3, outputs=(output,))
    assert finished.code == 4, finished.stderr
    assert "--store: cannot store the run in" in finished.message
    assert "refused by the test" in finished.message
    written = [path for action, path in calls if action == "write"]
    assert len(written) == 4
    (folder,) = {path.rpartition("/")[0] for path in written}
    assert [call for call in calls if call[0] != "write"] == [("delete_dir", folder)]
    assert objects(s3) == []
    assert listed(s3) == []
    assert read_results(output)["complete"] is True


def test_the_store_is_checked_before_the_run(s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "r.json"
    cases: list[tuple[dict[str, str | None], str, list[str]]] = [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, s3.url, ["SIGNATURE_DOES_NOT_MATCH", "check AWS_ACCESS_KEY_ID"]),
        ({"AWS_ACCESS_KEY_ID": "NOBODY"}, s3.url, ["check AWS_ACCESS_KEY_ID"]),
        # No credentials at all (nor ~/.aws, nor instance metadata): an unsigned request, refused.
        ({"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, s3.url, ["check AWS_ACCESS_KEY_ID"]),
        ({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"}, s3.url, ["NETWORK_CONNECTION"]),
        ({}, "s3://no-such-bucket-here/x", ["cannot write to the bucket", "no-such-bucket-here"]),
        ({"AWS_ENDPOINT_URL": "ftp://127.0.0.1"}, s3.url, ["AWS_ENDPOINT_URL: 'ftp://127.0.0.1' is not the URL"]),
        ({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333/path"}, s3.url, ["AWS_ENDPOINT_URL_S3", "host and port"]),
    ]
    for variables, url, named in cases:
        with monkeypatch.context() as changed:
            for name, value in variables.items():
                if value is None:
                    changed.delenv(name)
                else:
                    changed.setenv(name, value)
            started = time.monotonic()
            finished = run_in_process(run_args(outputs=[output], extra=["--store", url]))
        assert time.monotonic() - started < 15
        assert finished.code == 2, finished.stderr
        assert finished.message.startswith(f"batchmark run: error: --store: {url}: "), finished.message
        for text in named:
            assert text in finished.message, finished.message
        assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
        assert not output.exists()
    assert objects(s3) == []


def test_history_and_compare_over_a_store_that_cannot_be_read(s3: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stored_run(s3).code == 0
    cases: list[tuple[dict[str, str], str, list[str]]] = [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, s3.url, ["--store: cannot read", "check AWS_ACCESS_KEY_ID"]),
        ({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"}, s3.url, ["check AWS_ENDPOINT_URL"]),
        ({}, "s3://no-such-bucket-here/x", ["--store: s3://no-such-bucket-here/x: no such bucket"]),
        ({"AWS_ENDPOINT_URL": "localhost:8333"}, s3.url, ["--store: AWS_ENDPOINT_URL: 'localhost:8333'"]),
    ]
    for variables, url, named in cases:
        with monkeypatch.context() as changed:
            for name, value in variables.items():
                changed.setenv(name, value)
            for command in (["history", "--store", url], ["compare", "--store", url, "--baseline", "last", "x"]):
                finished = run_in_process(command)
                assert finished.code == 2, finished.stderr
                for text in named:
                    assert text in finished.message, finished.message
                assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
                assert "Traceback" not in finished.message


HOSTILE_STORES: dict[str, tuple[str, list[str]]] = {
    "no bucket": ("s3://", ["names no bucket"]),
    "no bucket, a prefix": ("s3:///runs", ["names no bucket"]),
    "capitals and an underscore": ("s3://Bad_Bucket/x", ["'Bad_Bucket' is not a bucket's name"]),
    "a bucket too short": ("s3://ab/x", ["3 to 63 characters long, not 2"]),
    "a bucket too long": (f"s3://{'a' * 64}/x", ["3 to 63 characters long, not 64"]),
    "a bucket that is an address": ("s3://192.168.0.1/x", ["is an IP address"]),
    "two dots": ("s3://bucket..name/x", ["two dots in a row"]),
    "a leading hyphen": ("s3://-bucket/x", ["is not a bucket's name"]),
    "a server and port": ("s3://127.0.0.1:9000/x", ["names a bucket, not a server", "AWS_ENDPOINT_URL"]),
    "credentials in the URL": ("s3://AKIAEXAMPLE:s3cr3t-value@bucket/x", ["carries no credentials"]),
    "a parent folder": ("s3://bucket/runs/../other", ["'..' part"]),
    "an empty part": ("s3://bucket/runs//x", ["an empty"]),
    "a query": ("s3://bucket/x?versionId=1", ["no query or fragment"]),
    "a fragment": ("s3://bucket/x#y", ["no query or fragment"]),
    "a space": ("s3://bucket/my runs", ["contains ' '"]),
    "a new line": ("s3://bucket/x\ny", ["contains '\\n'"]),
    "a right-to-left override": ("s3://bucket/x\u202eevil", ["contains '\\u202e'"]),
    "a prefix too long": (f"s3://bucket/{'p' * 600}", ["longer than 512 bytes"]),
    "another scheme": ("gs://bucket/x", ["gs:// stores are not supported"]),
}


@pytest.mark.parametrize("case", list(HOSTILE_STORES))
def test_hostile_s3_stores_are_refused_in_one_line(case: str, tmp_path: Path) -> None:
    """Refused before any request (no server here): `run`, `history` and `compare` alike."""
    url, named = HOSTILE_STORES[case]
    output = tmp_path / "r.json"
    for command in (
        run_args(outputs=[output], extra=["--store", url]),
        ["history", "--store", url],
        ["compare", "--store", url, "--baseline", "last", "x"],
    ):
        finished = run_in_process(command)
        assert finished.code == 2, finished.stderr
        assert "--store" in finished.message
        for text in named:
            assert text in finished.message, finished.message
        assert "Traceback" not in finished.message
        assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
        if command[0] != "run":  # run's validation error repeats the value given (config/load.py)
            assert "s3cr3t-value" not in finished.message
    assert not output.exists()


@pytest.fixture
def open_s3_store_again(s3: S3Store) -> scenarios.OpenStore:
    return lambda: results_store.open_store(s3.url)


def test_runs_before_and_after_a_compaction_are_listed_once_in_a_bucket(
    open_s3_store_again: scenarios.OpenStore,
) -> None:
    scenarios.runs_before_and_after_a_compaction_are_listed_once(open_s3_store_again)


def test_a_put_compacts_every_so_many_runs_in_a_bucket(
    open_s3_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.a_put_compacts_every_so_many_runs_and_merges_compacted_objects(open_s3_store_again, monkeypatch)


def test_an_interrupted_compaction_in_a_bucket(
    open_s3_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.an_interrupted_compaction_lists_each_run_once_and_is_finished_later(open_s3_store_again, monkeypatch)


def test_racing_compactions_in_a_bucket(
    open_s3_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.racing_compactions_lose_and_double_no_run(open_s3_store_again, monkeypatch)


def test_a_reader_during_a_compaction_in_a_bucket(
    open_s3_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.a_reader_meets_a_compaction_between_listing_and_reading(open_s3_store_again, monkeypatch)


def test_a_read_only_reader_of_a_bucket(
    open_s3_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.a_read_only_reader_lists_and_never_compacts(open_s3_store_again, monkeypatch)


def test_history_compacts_on_request_and_says_so_when_it_cannot(s3: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store = results_store.open_store(s3.url)
    scenarios.put_runs(store, 1, 2, 3)
    with monkeypatch.context() as refused:
        recording(refused, fail=lambda path: "/index/compacted/" in path)
        finished = run_in_process(["history", "--store", s3.url, "--compact", "--format", "json"])
        assert finished.code == 2, finished.stderr
        assert finished.message.startswith(f"batchmark history: error: --compact: cannot compact the index of {s3.url}")
        assert "refused by the test" in finished.message
        assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
        assert finished.stdout == ""
        assert [run["run_id"] for run in listed(s3)] == scenarios.ids(1, 2, 3)
    assert [run["run_id"] for run in listed(s3, "--compact")] == scenarios.ids(1, 2, 3)
    index = [path for path in objects(s3) if path.startswith("index/")]
    assert len(index) == 1
    assert index[0].startswith("index/compacted/20261206T080100Z-20261206T080300Z-")
