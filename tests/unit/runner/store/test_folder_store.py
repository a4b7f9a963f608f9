"""The folder store: a run appears whole or not at all; one run is stored once."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchmark.runner.results.report import RunReport
from batchmark.runner.store import results_store as store_module
from batchmark.runner.store.results_store import StoreError, indexed_once, open_store
from tests.unit.observability_data import simple_report as short_report


def test_a_run_cut_short_while_written_leaves_nothing_a_reader_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = short_report()
    store = open_store(str(tmp_path))

    def no_space(_: RunReport) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module, "render_report", no_space)
    with pytest.raises(StoreError, match="No space left on device"):
        store.put(report)
    assert store.index().runs == []
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []
    monkeypatch.undo()
    entry = store.put(report)
    assert [run.run_id for run in store.index().runs] == [report.run_id]
    assert store.report(entry).run_id == report.run_id


def test_a_run_is_stored_once(tmp_path: Path) -> None:
    report = short_report()
    store = open_store(str(tmp_path))
    store.put(report)
    with pytest.raises(StoreError, match="already in the store"):
        store.put(report)
    assert len(store.index().runs) == 1


def test_runs_are_listed_oldest_first(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    later = short_report().model_copy(update={"run_id": "later", "created_at": "2026-12-06T10:00:00+00:00"})
    earlier = short_report().model_copy(update={"run_id": "earlier", "created_at": "2026-12-06T09:00:00+01:00"})
    same_second = later.model_copy(update={"run_id": "same-second"})
    for report in (later, earlier, same_second):
        store.put(report)
    assert [run.run_id for run in store.index().runs] == ["earlier", "later", "same-second"]


def test_a_store_indexed_once_reads_its_index_at_the_first_look_up_and_after_its_own_puts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings = 0
    list_index = store_module.ResultsStore._index_objects

    def counted(store: store_module.ResultsStore) -> store_module._IndexObjects:
        nonlocal listings
        listings += 1
        return list_index(store)

    monkeypatch.setattr(store_module.ResultsStore, "_index_objects", counted)
    open_store(str(tmp_path)).put(short_report().model_copy(update={"run_id": "first"}))
    store = indexed_once(open_store(str(tmp_path)))
    listings = 0
    assert [run.run_id for run in store.index().runs] == ["first"]
    assert [run.run_id for run in store.index().runs] == ["first"]
    assert listings == 1
    # Another writer's run is not seen; its own put is.
    open_store(str(tmp_path)).put(short_report().model_copy(update={"run_id": "another"}))
    assert [run.run_id for run in store.index().runs] == ["first"]
    store.put(short_report().model_copy(update={"run_id": "own", "created_at": "2030-01-01T00:00:00+00:00"}))
    assert [run.run_id for run in store.index().runs][-1] == "own"
