"""Index compaction, as scenarios over any results store: tests/unit/runner/store/test_compaction.py runs them on a
folder, tests/integration/runner/test_s3_store.py on a real S3 server. Each takes ``open_store_again``: a new
``ResultsStore`` on the same store each call, as another process (a reader, another writer) would have."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from batchmark.runner.results.report import RunReport
from batchmark.runner.store import results_store
from batchmark.runner.store.results_store import ResultsStore, StoreError
from tests.unit.observability_data import simple_report

OpenStore = Callable[[], ResultsStore]
_FIRST_START = datetime.datetime(2026, 12, 6, 8, 0, tzinfo=datetime.UTC)


def run_report(number: int) -> RunReport:
    """Run ``number``, started ``number`` minutes after the first."""
    started = _FIRST_START + datetime.timedelta(minutes=number)
    return simple_report().model_copy(update={"run_id": f"run-{number:03d}", "created_at": started.isoformat()})


def put_runs(store: ResultsStore, *numbers: int) -> None:
    for number in numbers:
        store.put(run_report(number))


def listed(store: ResultsStore) -> list[str]:
    """The run ids a reader lists, in order; a reader that meets an unreadable entry fails the test."""
    index = store.index()
    assert index.unreadable == []
    return [run.run_id for run in index.runs]


def ids(*numbers: int) -> list[str]:
    return [f"run-{number:03d}" for number in numbers]


def loose_and_compacted(store: ResultsStore) -> tuple[int, int]:
    found = store._index_objects()
    return len(found.loose), len(found.compacted)


class Refusing:
    """A store's file system whose calls named in ``refused`` fail, as for an identity without the right."""

    def __init__(self, inner: Any, refused: set[str]) -> None:
        self.inner, self.refused = inner, refused

    def __getattr__(self, name: str) -> Any:
        if name in self.refused:

            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise PermissionError(13, f"refused by the test: {name}")

            return refuse
        return getattr(self.inner, name)


def refusing(store: ResultsStore, *refused: str) -> ResultsStore:
    return ResultsStore(
        Refusing(store.filesystem, set(refused)), store.root, store.name, renames=store.renames, readers=store.readers
    )


READ_ONLY = ("open_output_stream", "delete_file", "delete_dir", "move", "create_dir")


@contextmanager
def compacting_every(monkeypatch: pytest.MonkeyPatch, loose: int, merge_after: int = 16) -> Iterator[None]:
    with monkeypatch.context() as changed:
        changed.setattr(results_store, "COMPACT_AFTER", loose)
        changed.setattr(results_store, "MERGE_AFTER", merge_after)
        yield


def runs_before_and_after_a_compaction_are_listed_once(open_store_again: OpenStore) -> None:
    store = open_store_again()
    put_runs(store, 1, 3, 5)
    assert store.compact() == 3
    assert loose_and_compacted(store) == (0, 1)
    # Run 2 started inside the compacted object's span, run 6 after it.
    put_runs(open_store_again(), 6, 2)
    assert listed(open_store_again()) == ids(1, 2, 3, 5, 6)
    assert loose_and_compacted(store) == (2, 1)
    # A run is stored once, whether its entry is loose or compacted.
    for number in (3, 6):
        with pytest.raises(StoreError, match="already in the store"):
            store.put(run_report(number))
    assert store.compact() == 5
    assert loose_and_compacted(store) == (0, 1)
    assert listed(open_store_again()) == ids(1, 2, 3, 5, 6)
    entry = store.index().runs[0]
    assert store.report(entry).run_id == entry.run_id


def a_put_compacts_every_so_many_runs_and_merges_compacted_objects(
    open_store_again: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with compacting_every(monkeypatch, loose=3, merge_after=2):
        store = open_store_again()
        put_runs(store, 1, 2)
        assert loose_and_compacted(store) == (2, 0)
        put_runs(store, 3)
        assert loose_and_compacted(store) == (0, 1)
        put_runs(store, 4, 5, 6)
        assert loose_and_compacted(store) == (0, 2)
        put_runs(store, 7, 8, 9)  # two compacted objects: the third compaction merges them into its own
        assert loose_and_compacted(store) == (0, 1)
        put_runs(store, 10)
    assert listed(open_store_again()) == ids(*range(1, 11))


def an_interrupted_compaction_lists_each_run_once_and_is_finished_later(
    open_store_again: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store_again()
    put_runs(store, 1, 2, 3)
    cut_short = open_store_again()
    monkeypatch.setattr(cut_short, "_delete_all", lambda paths: None)  # killed after writing its object
    assert cut_short.compact() == 3
    assert loose_and_compacted(store) == (3, 1)
    assert listed(open_store_again()) == ids(1, 2, 3)
    # The next put's compaction finds the object holding the loose entries: it deletes them, gathering only run 4.
    with compacting_every(monkeypatch, loose=4):
        put_runs(store, 4)
    assert loose_and_compacted(store) == (0, 2)
    assert listed(open_store_again()) == ids(1, 2, 3, 4)


def racing_compactions_lose_and_double_no_run(open_store_again: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store_again()
    put_runs(store, 1, 2, 3)
    first, second = open_store_again(), open_store_again()
    write = first._write_atomically

    def second_compacts_first(folder: str, name: str, content: bytes) -> None:
        # Both listed the same loose entries; the second writes its object and deletes them before the first
        # writes its own, then deletes them again.
        assert second.compact() == 3
        write(folder, name, content)

    monkeypatch.setattr(first, "_write_atomically", second_compacts_first)
    assert first.compact() == 3
    assert loose_and_compacted(store) == (0, 2)
    assert listed(open_store_again()) == ids(1, 2, 3)
    assert open_store_again().compact() == 3
    assert loose_and_compacted(store) == (0, 1)
    assert listed(open_store_again()) == ids(1, 2, 3)


def a_reader_meets_a_compaction_between_listing_and_reading(
    open_store_again: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store_again()
    put_runs(store, 1, 2, 3)
    reader = open_store_again()
    read_all = reader._read_all
    compacted: list[int] = []

    def compaction_first(paths: list[str]) -> Iterator[bytes | BaseException]:
        if not compacted:
            compacted.append(open_store_again().compact())
        return read_all(paths)

    monkeypatch.setattr(reader, "_read_all", compaction_first)
    assert listed(reader) == ids(1, 2, 3)
    assert compacted == [3]


def a_read_only_reader_lists_and_never_compacts(open_store_again: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store_again()
    put_runs(store, 1, 2)
    store.compact()
    put_runs(store, 3, 4)
    reader = refusing(open_store_again(), *READ_ONLY)
    assert listed(reader) == ids(1, 2, 3, 4)
    with pytest.raises(StoreError, match=r"cannot compact the index of .*refused by the test"):
        reader.compact()
    assert loose_and_compacted(store) == (2, 1)
    # A writer that may put but not delete: its put succeeds, its compaction's object holds entries that stay
    # loose, and later puts' compactions do not gather them again.
    writer = refusing(open_store_again(), "delete_file")
    with compacting_every(monkeypatch, loose=3):
        put_runs(writer, 5)
        assert loose_and_compacted(store) == (3, 2)
        put_runs(writer, 6)
        assert loose_and_compacted(store) == (4, 3)
    assert listed(open_store_again()) == ids(*range(1, 7))
