"""Stream dispatch: every request submitted as it arrives, reported when its stream ends, the engine's death ending
the run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

import pytest

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.continuous import AdmissionQueue
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.dispatch.streaming import dispatch_streams
from batchmark.runner.engines.base import NO_TIMINGS, Completion, EngineClock, EngineDead, EngineInfo, WorkItem
from batchmark.runner.engines.simulated_engine import load_simulated_streaming_engine
from batchmark.runner.engines.streaming import StreamingEngine
from tests.unit.runner.dispatch.test_continuous import Reports


def items(count: int, output_tokens: int = 4) -> list[WorkItem]:
    return [WorkItem(RequestSpec(index, 8, output_tokens, -1, 0), 0.0, 0.0) for index in range(count)]


def stepped_engine() -> StreamingEngine:
    """The simulated engine streaming, its 2 ms steps slept."""
    config = BackendConfig(
        kind="vllm_python_async",
        model="m",
        engine="simulated",
        simulation={"time_scale": 1.0, "step_fixed_seconds": 0.002},
    )
    return load_simulated_streaming_engine(config, seed=0)


def test_every_request_is_streamed_at_once_and_reported_once_with_when_it_entered() -> None:
    config = BackendConfig(kind="vllm_python_async", model="m", engine="simulated", simulation={"time_scale": 0})
    engine = load_simulated_streaming_engine(config, seed=0)
    queue = AdmissionQueue()
    queue.put(items(40))
    reports = Reports(queue, 40)
    dispatch_streams(engine, queue, cast(Reporter, reports))
    engine.close()
    completions = [completion for report in reports.sent for completion in report.completions]
    assert sorted(completion.request_id for completion in completions) == list(range(40))
    assert all(completion.error is None and completion.stream is not None for completion in completions)
    # No cap of the worker's own: all 40 were in the engine together, so they finished in the same step.
    assert max(report.engine_batch or 0 for report in reports.sent) == 40
    for report in reports.sent:
        assert report.dispatched is not None
        assert len(report.dispatched) == len(report.completions)
        assert all(report.started_at <= entered <= report.finished_at for entered in report.dispatched)
        assert report.batch_wait(0.0) == 0.0  # nothing waits for a batch


def test_requests_that_arrive_while_others_stream_join_them() -> None:
    engine = stepped_engine()
    queue = AdmissionQueue()
    queue.put(items(2, output_tokens=10_000))  # 20 s of steps: still streaming when the late ones end
    reports = Reports(queue, 2)

    def late() -> None:
        while not queue._busy:  # the first two were taken into the engine
            threading.Event().wait(0.001)
        queue.put(items(4, output_tokens=2)[2:])

    arrival = threading.Thread(target=late)
    arrival.start()
    dispatch_streams(engine, queue, cast(Reporter, reports))
    arrival.join()
    engine.close()
    order = [completion.request_id for report in reports.sent for completion in report.completions]
    # The two short late requests finished while the two long ones still streamed (then cancelled at the close).
    assert sorted(order) == [2, 3]


def test_a_drain_waits_for_the_streams_in_flight() -> None:
    engine = stepped_engine()
    queue = AdmissionQueue()
    reports = Reports(queue, 10**9)
    thread = threading.Thread(target=dispatch_streams, args=(engine, queue, cast(Reporter, reports)))
    thread.start()
    queue.put(items(3, output_tokens=20))
    while not reports.sent and not queue._busy:
        threading.Event().wait(0.001)
    queue.drain()  # returns once nothing is in flight
    assert sum(len(report.completions) for report in reports.sent) == 3
    queue.close()
    thread.join(10)
    assert not thread.is_alive()
    engine.close()


class Dying:
    """A streaming engine whose second request finds it dead."""

    info = EngineInfo(kind="dying", model="m")
    clock = EngineClock()

    def prepare(self, item: WorkItem) -> WorkItem:
        return item

    async def stream(self, item: WorkItem) -> Completion:
        if item.spec.request_id == 1:
            raise EngineDead("the engine core died")
        await asyncio.sleep(3600 if item.spec.request_id == 2 else 0)
        return Completion(item.spec.request_id, 8, 4, None, NO_TIMINGS)

    def close(self) -> None:
        pass


def test_the_engine_dying_ends_the_dispatch_and_cancels_what_streams() -> None:
    queue = AdmissionQueue()
    queue.put(items(3))
    reports = Reports(queue, 10**9)
    with pytest.raises(EngineDead, match="the engine core died"):
        dispatch_streams(cast(Any, Dying()), queue, cast(Reporter, reports))
    reported = [completion.request_id for report in reports.sent for completion in report.completions]
    assert 2 not in reported
    assert 1 not in reported


class Broken(Dying):
    """A streaming engine whose adapter has a bug: an error that is no request's failure."""

    async def stream(self, item: WorkItem) -> Completion:
        raise KeyError("a bug")


def test_an_error_that_is_no_request_s_ends_the_dispatch_as_itself() -> None:
    """The worker reports it as a crash with its traceback, not as the engine's death."""
    queue = AdmissionQueue()
    queue.put(items(2))
    with pytest.raises(KeyError, match="a bug"):
        dispatch_streams(cast(Any, Broken()), queue, cast(Reporter, Reports(queue, 10**9)))
