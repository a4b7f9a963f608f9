"""Index compaction on a folder store (the same scenarios run on a real S3 server in
tests/integration/runner/test_s3_store.py), and what a compacted object holds."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from batchmark.runner.store.results_store import ResultsStore, open_store
from tests.unit.runner.store import compaction_scenarios as scenarios


@pytest.fixture
def open_store_again(tmp_path: Path) -> scenarios.OpenStore:
    return lambda: open_store(str(tmp_path))


def test_runs_before_and_after_a_compaction_are_listed_once(open_store_again: scenarios.OpenStore) -> None:
    scenarios.runs_before_and_after_a_compaction_are_listed_once(open_store_again)


def test_a_put_compacts_every_so_many_runs(
    open_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenarios.a_put_compacts_every_so_many_runs_and_merges_compacted_objects(open_store_again, monkeypatch)


def test_an_interrupted_compaction(open_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    scenarios.an_interrupted_compaction_lists_each_run_once_and_is_finished_later(open_store_again, monkeypatch)


def test_racing_compactions(open_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    scenarios.racing_compactions_lose_and_double_no_run(open_store_again, monkeypatch)


def test_a_reader_during_a_compaction(open_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    scenarios.a_reader_meets_a_compaction_between_listing_and_reading(open_store_again, monkeypatch)


def test_a_read_only_reader(open_store_again: scenarios.OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    scenarios.a_read_only_reader_lists_and_never_compacts(open_store_again, monkeypatch)


def compacted_objects(root: Path) -> list[Path]:
    return sorted((root / "index" / "compacted").glob("*"))


def test_a_compacted_object_is_gzipped_json_lines_named_by_its_span(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    scenarios.put_runs(store, 2, 1, 3)
    store.compact()
    (compacted,) = compacted_objects(tmp_path)
    assert compacted.name.startswith("20261206T080100Z-20261206T080300Z-")
    assert compacted.name.endswith(".jsonl.gz")
    lines = gzip.decompress(compacted.read_bytes()).decode().splitlines()
    assert sorted(json.loads(line)["run_id"] for line in lines) == scenarios.ids(1, 2, 3)
    assert sorted(path.name for path in (tmp_path / "index").iterdir()) == ["compacted"]


def test_what_cannot_be_read_is_named_and_left_in_place(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    scenarios.put_runs(store, 1, 2)
    index = tmp_path / "index"
    (index / "20000101T000000Z-broken.json").write_text("{not json")
    store.compact()
    (compacted,) = compacted_objects(tmp_path)
    # A line that is not an entry: the object's other runs are listed, the line named.
    lines = gzip.decompress(compacted.read_bytes()).splitlines()
    compacted.write_bytes(gzip.compress(b"\n".join([lines[0], b"{not an entry", lines[1]]) + b"\n"))
    (index / "compacted" / "20000101T000000Z-20000101T000000Z-00.jsonl.gz").write_bytes(b"not gzip")
    found = store.index()
    assert [run.run_id for run in found.runs] == scenarios.ids(1, 2)
    assert [problem.partition(":")[0] for problem in found.unreadable] == [
        "20000101T000000Z-broken.json",
        "compacted/20000101T000000Z-20000101T000000Z-00.jsonl.gz",
        f"compacted/{compacted.name}",
    ]
    assert "line 2: " in found.unreadable[2]
    # A compaction leaves them whole, to be named again, and gathers nothing it cannot read.
    assert store.compact() == 0
    assert len(compacted_objects(tmp_path)) == 2
    assert (index / "20000101T000000Z-broken.json").exists()
    assert len(store.index().unreadable) == 3


def test_a_store_with_nothing_to_compact_is_left_alone(tmp_path: Path) -> None:
    store: ResultsStore = open_store(str(tmp_path))
    assert store.compact() == 0
    scenarios.put_runs(store, 1)
    assert store.compact() == 1
    assert store.compact() == 0
    assert len(compacted_objects(tmp_path)) == 1
