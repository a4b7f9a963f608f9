"""`batchmark run --store` and `batchmark history`: runs kept in a folder beyond the run, browsable by model,
hardware and date, listed and filtered from the store's index; bad input refused with one line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from batchmark.runner.store.results_store import Index, ResultsStore
from tests.cli import Finished, read_results, run_in_process
from tests.integration.runner.harness import backend, run_args, stepped_run_args

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for the history's columns whatever width the test process was given (xdist's workers: 80)."""
    monkeypatch.setenv("COLUMNS", "200")


def stored_run(store: Path, *extra: str, model: str = "org/m", outputs: tuple[Path, ...] = ()) -> Finished:
    return run_in_process(run_args(backend(model=model), outputs=list(outputs), extra=["--store", str(store), *extra]))


def history(*args: str) -> Finished:
    return run_in_process(["history", *args])


def listed(store: Path, *filters: str) -> list[dict[str, Any]]:
    finished = history("--store", str(store), "--format", "json", *filters)
    assert finished.code == 0, finished.stderr
    runs: list[dict[str, Any]] = json.loads(finished.stdout)
    return runs


def test_runs_are_kept_whole_in_a_browsable_layout_and_listed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    output = tmp_path / "r.json"
    first = stored_run(store, outputs=(output,))
    assert first.code == 0, first.stderr
    second = stored_run(store, "--repeats", "2", model="org/other")
    assert second.code == 0, second.stderr
    results = read_results(output)
    assert f"stored run {results['run_id']} in {store}" in first.message

    runs = listed(store)
    assert [run["model"] for run in runs] == ["org/m", "org/other"]
    mine = runs[0]
    assert mine["run_id"] == results["run_id"]
    assert mine["simulated"] is True
    assert mine["output_tokens_per_second"] == pytest.approx(
        results["benchmarks"][0]["throughput"]["output_tokens_per_second"]
    )
    # The layout a person browses: model, hardware, date, then the run.
    folder = store / mine["folder"]
    parts = Path(mine["folder"]).parts
    assert parts[:3] == ("runs", "org--m", "1x-simulated_H100-class_GPU")
    assert parts[4].endswith(results["run_id"])
    assert {path.name for path in folder.iterdir()} == {
        "results.json",
        "report.html",
        "config.yaml",
        "fingerprint.json",
    }
    assert json.loads((folder / "results.json").read_text())["run_id"] == results["run_id"]
    assert "org/m" in (folder / "report.html").read_text()
    # The other model's run has repeats: its interval is in the index.
    assert runs[1]["output_tokens_per_second_low"] is not None
    # Different models: different workloads.
    assert runs[0]["fingerprint"]["key"] != runs[1]["fingerprint"]["key"]


LONGER_PROMPTS = "kind=synthetic_text,prompt_tokens=128,output_tokens=16"


def test_the_same_workload_has_one_fingerprint_whatever_served_it(tmp_path: Path) -> None:
    """The simulated engine's cost model is the stack (as a vLLM version is), not the workload."""
    store = tmp_path / "store"
    assert stored_run(store).code == 0
    slower = run_in_process(
        run_args(backend(model="org/m", **{"simulation.step_fixed_seconds": 0.05}), extra=["--store", str(store)])
    )
    assert slower.code == 0, slower.stderr
    longer = run_in_process(
        [*run_args(backend(model="org/m"), extra=["--store", str(store)]), "--data", LONGER_PROMPTS]
    )
    assert longer.code == 0, longer.stderr
    first, second, third = listed(store)
    assert first["fingerprint"]["key"] == second["fingerprint"]["key"]
    assert first["fingerprint"]["stack"]["simulation"] != second["fingerprint"]["stack"]["simulation"]
    assert third["fingerprint"]["key"] != first["fingerprint"]["key"]
    assert listed(store, "--fingerprint", first["fingerprint"]["key"][:6] + "*") == [first, second]


def test_history_filters_and_formats(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for model in ("org/a", "org/b", "other/c"):
        assert stored_run(store, model=model).code == 0
    assert [run["model"] for run in listed(store, "--model", "org/*")] == ["org/a", "org/b"]
    assert [run["model"] for run in listed(store, "--last", "1")] == ["other/c"]
    assert listed(store, "--gpu", "*H100*", "--engine-version", "*") == []  # the simulated engine has no version
    assert len(listed(store, "--gpu", "*H100*")) == 3
    assert listed(store, "--since", "2999-01-01") == []
    assert len(listed(store, "--until", "2999-01-01T00:00:00+00:00")) == 3
    table = history("--store", str(store))
    assert table.code == 0, table.stderr
    for shown in ("3 stored runs", "other/c", "simulated"):
        assert shown in table.stdout
    rows = list(csv.DictReader(io.StringIO(history("--store", str(store), "--format", "csv").stdout)))
    assert [row["model"] for row in rows] == ["org/a", "org/b", "other/c"]
    assert all(len(row["fingerprint"]) == 16 for row in rows)
    written = tmp_path / "runs.csv"
    finished = history("--store", str(store), "--model", "org/b", "-o", str(written))
    assert finished.code == 0, finished.stderr
    assert [row["model"] for row in csv.DictReader(io.StringIO(written.read_text()))] == ["org/b"]
    assert "no stored runs match" in history("--store", str(store), "--model", "none").stdout


def test_a_store_that_cannot_be_written_fails_loudly_and_keeps_the_results(tmp_path: Path) -> None:
    """The store's check passes before the run (the folder can be made); then its index is a file, not a folder."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "index").write_text("not a folder")
    output = tmp_path / "r.json"
    finished = stored_run(store, outputs=(output,))
    assert finished.code == 4
    assert "--store: cannot store the run in" in finished.message
    assert "the results files are unaffected" in finished.message
    assert "Traceback" not in finished.message
    assert read_results(output)["complete"] is True
    assert not any((store / "runs").rglob("*")), "the run's folder, without its index entry, was left behind"


def test_history_as_a_page_charts_throughput_over_time_per_model_and_hardware(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for model, repeats in (("org/a<b>", "1"), ("org/a<b>", "2"), ("org/c", "1")):
        assert stored_run(store, "--repeats", repeats, model=model).code == 0
    page = tmp_path / "history.html"
    finished = history("--store", str(store), "-o", str(page))
    assert finished.code == 0, finished.stderr
    assert f"wrote {page} (3 runs)" in finished.message
    html = page.read_text()
    assert html.count('<figure class="chart"') == 2  # one per model on the one (simulated) GPU
    assert "org/a&lt;b&gt; on 1 x simulated H100-class GPU: output tokens/s" in html
    assert html.count('<g class="error-bar">') == 1  # the run with repeats
    assert "SIMULATED ENGINE" in html
    assert "Content-Security-Policy" in html
    for run in listed(store):
        assert f"<code>{run['run_id']}</code>" in html


def test_a_damaged_index_entry_is_named_and_the_rest_listed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert stored_run(store).code == 0
    (store / "index" / "20000101T000000Z-broken.json").write_text("{not json")
    finished = history("--store", str(store), "--format", "json")
    assert finished.code == 0
    assert len(json.loads(finished.stdout)) == 1
    assert "left out an index entry that cannot be read: 20000101T000000Z-broken.json" in finished.message


def test_user_text_in_the_history_is_printed_literally(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert stored_run(store, model="org/m[/x]").code == 0
    table = history("--store", str(store))
    assert table.code == 0, table.stderr
    assert "org/m[/x]" in table.stdout
    assert Path(listed(store)[0]["folder"]).parts[1] == "org--m_--x"


HISTORY_CASES: dict[str, tuple[list[str], list[str]]] = {
    "no such store": (["--store", "{t}/none"], ["--store", "none", "no such folder"]),
    "an S3 bucket that is not one": (["--store", "s3://Bad_Bucket/runs"], ["--store", "'Bad_Bucket' is not a bucket"]),
    "another scheme": (["--store", "gs://bucket/runs"], ["--store", "gs:// stores are not supported"]),
    "a file:// URL on another host": (["--store", "file://server/runs"], ["--store", "names the host 'server'"]),
    "an empty store": (["--store", ""], ["--store", "names no folder"]),
    "a date that is not one": (["--store", "{t}", "--since", "yesterday"], ["--since", "'yesterday'", "ISO 8601"]),
    "no runs": (["--store", "{t}", "--last", "0"], ["--last", "'0'", "1 or more"]),
    "a count that is not one": (["--store", "{t}", "--last", "ten"], ["--last", "'ten'"]),
    "an unknown format": (["--store", "{t}", "--format", "xml"], ["--format", "'xml'", "table, json, csv"]),
    "an output that is text": (["--store", "{t}", "-o", "{t}/h.txt"], ["--output", "h.txt", ".json, .csv or .html"]),
    "an output in /proc": (["--store", "{t}", "-o", "/proc/h.json"], ["--output", "/proc/h.json"]),
}


@pytest.mark.parametrize("case", list(HISTORY_CASES))
def test_history_refuses_bad_input(case: str, tmp_path: Path) -> None:
    arguments, named = HISTORY_CASES[case]
    before = sorted(path.name for path in tmp_path.iterdir())
    finished = history(*(argument.replace("{t}", str(tmp_path)) for argument in arguments))
    assert finished.code == 2
    for text in named:
        assert text in finished.message, finished.message
    assert "Traceback" not in finished.message
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
    assert finished.stdout == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_history_compacts_the_index_on_request(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for model in ("org/a", "org/b"):
        assert stored_run(store, model=model).code == 0
    before = listed(store)
    index = store / "index"
    # Bad input is refused before the store is changed.
    assert history("--store", str(store), "--compact", "--format", "xml").code == 2
    assert len(list(index.glob("*.json"))) == 2
    assert listed(store, "--compact") == before
    assert [path.name for path in index.iterdir()] == ["compacted"]
    assert len(list((index / "compacted").iterdir())) == 1
    assert stored_run(store, model="org/c").code == 0
    assert [run["model"] for run in listed(store)] == ["org/a", "org/b", "org/c"]


def test_history_says_in_one_line_when_it_cannot_compact(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert stored_run(store).code == 0
    (store / "index" / "compacted").write_text("not a folder")
    finished = history("--store", str(store), "--compact", "--format", "json")
    assert finished.code == 2
    assert finished.message.startswith(f"batchmark history: error: --compact: cannot compact the index of {store}: ")
    assert "Traceback" not in finished.message
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
    assert finished.stdout == ""
    assert len(listed(store)) == 1


def repeated_run(store: Path, step_fixed: float, *extra: str) -> str:
    """A stored run of a short stepped workload (harness.stepped_run_args); its run id."""
    finished = run_in_process(stepped_run_args(step_fixed, "--store", str(store), *extra))
    assert finished.code == 0, finished.stderr
    return str(listed(store)[-1]["run_id"])


def compare(*args: str) -> Finished:
    return run_in_process(["compare", *args])


def test_a_regression_against_a_baseline_exits_non_zero_and_an_equal_run_does_not(tmp_path: Path) -> None:
    store = tmp_path / "store"
    base = repeated_run(store, 0.01, "--repeats", "3")
    equal = repeated_run(store, 0.01, "--repeats", "3")
    slower = repeated_run(store, 0.03, "--repeats", "3")  # every step about three times as long
    regressed = compare("--store", str(store), "--baseline", base, slower)
    assert regressed.code == 6, regressed.stderr
    verdict = regressed.stdout.splitlines()[-1]
    assert verdict.startswith(f"{slower} against {base} (baseline): regressed True: ")
    assert "Welch's t-test p=" in verdict
    assert "beyond the 5% threshold" in verdict
    # `last`: the latest earlier run of the same workload (the slower engine is the stack, not the workload).
    same = compare("--store", str(store), "--baseline", "last", equal)
    assert same.code == 0, same.stderr
    assert same.stdout.splitlines()[-1].startswith(f"{equal} against {base} (baseline): regressed False: ")
    # A drop the threshold allows is no regression; unique starts of ids are enough.
    allowed = compare("--store", str(store), "--baseline", base[:8], slower[:8], "--threshold", "99%")
    assert allowed.code == 0, allowed.stderr
    assert "regressed False" in allowed.stdout.splitlines()[-1]


def test_compare_picks_stored_runs_with_the_history_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI pipeline gates on its latest run without knowing its id: `--last 1 --baseline last`."""
    store = tmp_path / "store"
    base = repeated_run(store, 0.01, "--repeats", "3")
    equal = repeated_run(store, 0.01, "--repeats", "3")
    slower = repeated_run(store, 0.03, "--repeats", "3")
    index_reads = 0
    read_index = ResultsStore.index

    def counted(self: ResultsStore) -> Index:
        nonlocal index_reads
        index_reads += 1
        return read_index(self)

    monkeypatch.setattr(ResultsStore, "index", counted)
    gate = compare("--store", str(store), "--last", "1", "--baseline", "last")
    assert gate.code == 6, gate.stderr
    assert index_reads == 1  # the filters and the baseline look runs up in one reading of the index
    monkeypatch.undo()
    assert gate.stdout.splitlines()[-1].startswith(f"{slower} against {equal} (baseline): regressed True: ")
    # Picked runs follow those named, oldest first; the first is the baseline.
    key = listed(store)[0]["fingerprint"]["key"]
    every = compare("--store", str(store), "--fingerprint", key[:6] + "*")
    assert every.code == 0, every.stderr
    assert f"{equal} against {base}" in every.stdout
    assert f"{slower} against {base}" in every.stdout
    named_first = compare("--store", str(store), slower, "--last", "2")
    assert named_first.code == 0, named_first.stderr
    assert f"{equal} against {slower}" in named_first.stdout  # slower, named, is not picked twice
    assert f"{slower} against {slower}" not in named_first.stdout


def test_a_baseline_of_another_workload_or_without_repeats_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    base = repeated_run(store, 0.004, "--repeats", "2")
    other = repeated_run(
        store, 0.004, "--repeats", "2", "--data", "kind=synthetic_text,prompt_tokens=64,output_tokens=16"
    )
    single = repeated_run(store, 0.004)
    refused = compare("--store", str(store), "--baseline", base, other)
    assert refused.code == 2
    assert f"--baseline: {other} is not comparable with {base} (baseline): data.prompt_tokens: 32 against 64" in (
        refused.message
    )
    unrepeated = compare("--store", str(store), "--baseline", base, single)
    assert unrepeated.code == 2
    assert f"--baseline: a regression verdict needs repeats; {single} has none" in unrepeated.message
    # Without --baseline, runs of different workloads are compared, under a warning.
    page = tmp_path / "compare.html"
    warned = compare("--store", str(store), base, other, "-o", str(page))
    assert warned.code == 0, warned.stderr
    assert f"warning: {other} is not the same workload as {base}: data.prompt_tokens: 32 against 64" in warned.message
    # The report shows each run's fingerprint and says the same loudly.
    html = page.read_text()
    for entry in listed(store)[:2]:
        assert f"workload fingerprint <code>{entry['fingerprint']['key']}</code>" in html
    assert f"{other}: NOT THE SAME WORKLOAD as {base}: data.prompt_tokens: 32 against 64" in html


COMPARE_CASES: dict[str, tuple[list[str], list[str]]] = {
    "a threshold that is not a percentage": (["--baseline", "a.json", "a.json", "--threshold", "x"], ["--threshold"]),
    "a threshold of all": (["--baseline", "a.json", "a.json", "--threshold", "100"], ["--threshold", "'100'"]),
    "last without a store": (["--baseline", "last", "a.json"], ["--baseline", "give --store"]),
    "a run the store lacks": (
        ["--store", "{t}/store", "nothere", "a.json"],
        ["'nothere' is not a run in the store", "nor is it a file"],
    ),
    "a store that is not one": (["--store", "{t}/none", "x", "y"], ["--store", "no such folder"]),
    "one result without a baseline": (["a.json"], ["at least two"]),
    "a filter without a store": (["--model", "o*", "a.json", "a.json"], ["--model: picks stored runs: give --store"]),
    "a filter that picks nothing": (
        ["--store", "{t}/store", "--model", "nobody", "--last", "3"],
        ["--model --last: no stored run matches in"],
    ),
    "a count of no runs": (["--store", "{t}/store", "--last", "0"], ["--last: '0' is not a whole number"]),
    "a time that is not one": (["--store", "{t}/store", "--since", "yesterday"], ["--since: 'yesterday'"]),
}


@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_refuses_bad_input(case: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    repeated_run(store, 0.004)
    repeated_run(store, 0.004)
    (tmp_path / "a.json").write_text((store / listed(store)[0]["folder"] / "results.json").read_text())
    arguments, named = COMPARE_CASES[case]
    finished = compare(
        *(argument.replace("{t}", str(tmp_path)).replace("a.json", str(tmp_path / "a.json")) for argument in arguments)
    )
    assert finished.code == 2
    for text in named:
        assert text in finished.message, finished.message
    assert "Traceback" not in finished.message
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr
    assert finished.stdout == ""


def test_an_ambiguous_start_of_an_id_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = repeated_run(store, 0.004)
    # A second index entry whose id starts as the first's does.
    (entry_path,) = (store / "index").glob("*.json")
    twin = json.loads(entry_path.read_text())
    twin["run_id"] = first[:6] + "twin"
    (store / "index" / entry_path.name.replace(first, twin["run_id"])).write_text(json.dumps(twin))
    finished = compare("--store", str(store), first[:6], first)
    assert finished.code == 2
    assert f"results: '{first[:6]}' starts 2 stored runs' ids; give more of it" in finished.message


def test_a_run_is_judged_against_its_baseline_as_it_ends(tmp_path: Path) -> None:
    store = tmp_path / "store"
    base = repeated_run(store, 0.01, "--repeats", "3")
    output, page = tmp_path / "slower.json", tmp_path / "slower.html"
    finished = run_in_process(
        stepped_run_args(
            0.03,
            "--repeats",
            "3",
            "--store",
            str(store),
            "--baseline",
            "last",
            "--output",
            str(output),
            "--output",
            str(page),
        )
    )
    assert finished.code == 0, finished.stderr  # the run did what it was asked; `compare --baseline` gates
    assert "regressed True: throughputx32: output tokens/s -" in finished.message
    regression = read_results(output)["regression"]
    assert (regression["baseline"], regression["verdict"]) == (base, "True")
    assert regression["benchmarks"][0]["p_value"] < 0.05
    assert f"against the baseline {base}: regressed True" in page.read_text()
    # The stored copy carries its verdict too.
    stored = listed(store)[-1]
    assert json.loads((store / stored["folder"] / "results.json").read_text())["regression"]["verdict"] == "True"
    # Without an earlier run of its workload: no verdict, and the run is not failed for it.
    alone = run_in_process(run_args(backend(model="org/alone"), extra=["--store", str(store), "--baseline", "last"]))
    assert alone.code == 0, alone.stderr
    assert "regressed Unknown: no earlier complete run of this workload" in alone.message
