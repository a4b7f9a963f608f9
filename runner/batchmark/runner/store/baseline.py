"""A run's baseline in a results store: a stored run named by its id, or ``last``, the latest complete run of the
same workload that started before it; and the run's regression verdict against it."""

from __future__ import annotations

from batchmark.runner.results.fingerprint import fingerprint, workload_differences
from batchmark.runner.results.regression import DEFAULT_THRESHOLD, regression
from batchmark.runner.results.report import RegressionReport, RunReport, Verdict
from batchmark.runner.store.entries import StoredRun, utc
from batchmark.runner.store.results_store import ResultsStore, StoreError, open_store

LAST = "last"


class BaselineError(Exception):
    """No baseline to judge against: the message says why."""


def stored_run(store: ResultsStore, reference: str, option: str) -> StoredRun:
    """The stored run whose id is ``reference``, or starts with it if only one does."""
    runs = store.index().runs
    exact = [run for run in runs if run.run_id == reference]
    found = exact or [run for run in runs if reference and run.run_id.startswith(reference)]
    if not found:
        raise BaselineError(f"{option}: {reference!r} is not a run in the store {store.name}")
    if len(found) > 1:
        raise BaselineError(f"{option}: {reference!r} starts {len(found)} stored runs' ids; give more of it")
    return found[0]


def latest_of_workload(store: ResultsStore, report: RunReport) -> StoredRun:
    """The latest complete stored run of ``report``'s workload that started before it (never itself)."""
    key, started = fingerprint(report).key, utc(report.created_at)
    earlier = [
        run
        for run in store.index().runs
        if run.fingerprint.key == key and run.complete and run.run_id != report.run_id and run.started <= started
    ]
    if not earlier:
        raise BaselineError(f"no earlier complete run of this workload (fingerprint {key}) in the store {store.name}")
    return earlier[-1]


def baseline_run(store: ResultsStore, reference: str, report: RunReport, option: str) -> StoredRun:
    return latest_of_workload(store, report) if reference == LAST else stored_run(store, reference, option)


def judge(
    store: ResultsStore, reference: str, report: RunReport, threshold: float = DEFAULT_THRESHOLD
) -> RegressionReport:
    """``report`` against its baseline in ``store``; a verdict of Unknown, saying why, when there is none to judge
    against (the run itself never fails for its baseline)."""
    try:
        stored = baseline_run(store, reference, report, "baseline")
        baseline = store.report(stored)
    except (BaselineError, StoreError) as error:
        return _unknown(None, threshold, str(error))
    differences = workload_differences(fingerprint(baseline), fingerprint(report))
    if differences:
        return _unknown(
            baseline.run_id, threshold, f"the baseline {baseline.run_id} is another workload: {'; '.join(differences)}"
        )
    return regression(baseline, report, threshold)


def judge_in(
    location: str, reference: str, report: RunReport, threshold: float = DEFAULT_THRESHOLD
) -> RegressionReport:
    """``judge`` in the store ``location`` names; Unknown, saying why, when it cannot be opened."""
    try:
        store = open_store(location)
    except (StoreError, ValueError) as error:
        return _unknown(None, threshold, str(error))
    return judge(store, reference, report, threshold)


def _unknown(baseline: str | None, threshold: float, reason: str) -> RegressionReport:
    return RegressionReport(
        baseline=baseline, verdict=Verdict.UNKNOWN, threshold=threshold, benchmarks=[], reason=reason
    )
