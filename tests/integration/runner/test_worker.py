"""The engine worker process and the seed's engine lifecycle, driven directly."""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import time

import pytest

from batchmark.runner.config.backend import VllmPythonBatchBackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.backend import VllmPythonBatchBackend
from batchmark.runner.dispatch.batcher import MicroBatcher
from batchmark.runner.dispatch.messages import BatchReport, Stop, Submit
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.dispatch.worker import EngineWorker, _QueueSwitch, _receive_requests
from batchmark.runner.engines.base import WorkItem
from batchmark.runner.engines.simulated_engine import load_simulated_engine

pytestmark = pytest.mark.integration


def backend_config(**changes: object) -> VllmPythonBatchBackendConfig:
    settings: dict[str, object] = {
        "model": "m",
        "engine": "simulated",
        "batch_size": 8,
        "batch_timeout": 0.05,
        "simulation": {"time_scale": 0.2},
    }
    settings.update(changes)
    return VllmPythonBatchBackendConfig.model_validate(settings)


def collect(worker: EngineWorker, expected: int, timeout: float = 30) -> list[BatchReport]:
    reports: list[BatchReport] = []
    deadline = time.monotonic() + timeout
    while sum(len(r.completions) for r in reports) < expected and time.monotonic() < deadline:
        reports += [message for message in worker.receive(0.5) if isinstance(message, BatchReport)]
    return reports


def specs(count: int, first: int = 0) -> list[tuple[RequestSpec, float]]:
    now = time.monotonic()
    return [(RequestSpec(first + i, 32, 16, -1, 0), now) for i in range(count)]


def test_validate_in_the_main_process_loads_nothing() -> None:
    backend = VllmPythonBatchBackend(backend_config())
    backend.validate()
    assert not backend.engine_loaded
    assert backend.load_seconds is None


def test_ensure_engine_is_idempotent() -> None:
    backend = VllmPythonBatchBackend(backend_config())
    first = backend._ensure_engine()
    assert backend._ensure_engine() is first
    assert backend.engine_loaded


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_worker_batches_one_generate_at_a_time(monkeypatch: pytest.MonkeyPatch, context: str) -> None:
    monkeypatch.setenv("BATCHMARK_MP_CONTEXT", context)
    worker = EngineWorker(backend_config(), seed=1)
    try:
        ready = worker.start()
        assert ready is not None
        assert ready.info.kind == "simulated"
        assert ready.load_seconds >= 0
        worker.submit(specs(20))
        reports = collect(worker, 20)
    finally:
        worker.close()
    assert [len(report.completions) for report in reports] == [8, 8, 4]
    assert [report.full for report in reports] == [True, True, False]
    assert sorted(c.request_id for r in reports for c in r.completions) == list(range(20))
    for earlier, later in itertools.pairwise(reports):
        assert earlier.finished_at <= later.started_at  # never two generate() calls at once
    assert all(c.output_tokens == 16 and c.prompt_tokens == 32 for r in reports for c in r.completions)


def test_drain_drops_the_queue_and_waits_for_the_running_batch() -> None:
    worker = EngineWorker(backend_config(batch_size=4, simulation={"time_scale": 1.0}), seed=1)
    try:
        worker.start()
        worker.submit(specs(40))
        time.sleep(0.2)
        finished_while_draining = worker.drain()
        assert worker.receive(0.5) == []  # nothing of the dropped requests ever runs
        worker.submit(specs(4, first=100))
        after = collect(worker, 4)
    finally:
        worker.close()
    ran = sum(len(report.completions) for report in finished_while_draining)
    assert 0 < ran < 40  # the batch in progress finished; the queued rest was dropped
    assert [c.request_id for r in after for c in r.completions] == [100, 101, 102, 103]


def test_a_worker_that_cannot_load_reports_why() -> None:
    # A value the main process's check refuses, so that only the worker's load can find it here.
    worker = EngineWorker(backend_config(vllm_config={"max_model_len": -1}), seed=1)
    try:
        with pytest.raises(RuntimeError, match="max_model_len"):
            worker.start()
    finally:
        worker.close()


def test_reports_carry_engine_time_steps_overhead_and_harness_cpu() -> None:
    worker = EngineWorker(backend_config(), seed=1)
    try:
        worker.start()
        worker.submit(specs(24))
        reports = collect(worker, 24)
    finally:
        worker.close()
    assert [len(report.completions) for report in reports] == [8, 8, 8]
    # Eight 32-token prompts prefill in one step that samples their first token; fifteen decode steps follow.
    assert [report.steps for report in reports] == [16, 16, 16]
    for report in reports:
        assert report.engine_seconds is not None
        assert 0 < report.engine_seconds <= report.finished_at - report.started_at
        assert report.overhead_seconds >= 0
    cpu = [report.harness_cpu for report in reports]
    assert cpu == sorted(cpu)
    assert cpu[-1] > 0


def test_prompts_are_built_by_the_receiving_thread_as_requests_arrive() -> None:
    engine = load_simulated_engine(backend_config(), seed=1)
    built_on: list[str] = []

    class Recording:
        def prepare(self, item: WorkItem) -> WorkItem:
            built_on.append(threading.current_thread().name)
            return engine.prepare(item)

    ours, theirs = multiprocessing.Pipe(duplex=True)
    batcher: MicroBatcher[WorkItem] = MicroBatcher(batch_size=4, batch_timeout=10.0)
    reporter = Reporter(ours)
    receiver = threading.Thread(
        target=_receive_requests, args=(ours, _QueueSwitch(batcher), reporter, Recording()), name="batchmark-receiver"
    )
    receiver.start()
    try:
        theirs.send(Submit(specs(4)))
        batch = batcher.next_batch()
        assert batch is not None
        assert all(item.prepared is not None for item in batch.items)
        assert built_on == ["batchmark-receiver"] * 4
    finally:
        theirs.send(Stop())
        receiver.join(timeout=10)
        reporter.close()
