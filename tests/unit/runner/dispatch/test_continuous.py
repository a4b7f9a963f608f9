"""Continuous dispatch's loop over GenerateEngine, on a stand-in for vLLM's LLMEngine step API."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.continuous import AdmissionQueue, dispatch_continuously
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.reporter import Reporter
from batchmark.runner.engines.base import EngineClock, EngineInfo, GenerateEngine, Prepared, WorkItem
from batchmark.runner.engines.vllm_engine import StepCounter


class StepEngine:
    """``add_request``/``step`` as vLLM's LLMEngine has them; request ``i`` needs ``lengths[i]`` steps. A prompt
    of None is refused at ``add_request``, as vLLM refuses an invalid one."""

    def __init__(self, lengths: dict[str, int], on_step: Any = None) -> None:
        self.left: dict[str, int] = {}
        self.lengths = lengths
        self.in_flight_at_steps: list[int] = []
        self.on_step = on_step

    def add_request(self, request_id: str, prompt: Any, params: Any) -> None:
        if prompt is None:
            raise ValueError("prompt too long")
        self.left[request_id] = self.lengths[request_id]

    def step(self) -> list[Any]:
        self.in_flight_at_steps.append(len(self.left))
        if self.on_step is not None:
            self.on_step(len(self.in_flight_at_steps))
        finished = []
        for request_id in list(self.left):
            self.left[request_id] -= 1
            if self.left[request_id] == 0:
                del self.left[request_id]
                output = SimpleNamespace(token_ids=[0] * self.lengths[request_id], finish_reason="length")
                finished.append(
                    SimpleNamespace(
                        request_id=request_id, finished=True, prompt_token_ids=[1], outputs=[output], metrics=None
                    )
                )
        return finished


class Reports:
    """The reporter's side: keeps what was sent, and closes the queue once ``expected`` requests came back."""

    def __init__(self, queue: AdmissionQueue, expected: int) -> None:
        self.queue, self.expected = queue, expected
        self.sent: list[BatchReport] = []

    def send(self, report: BatchReport) -> None:
        self.sent.append(report)
        if sum(len(sent.completions) for sent in self.sent) >= self.expected:
            self.queue.close()


def generate_engine(stand_in: StepEngine) -> GenerateEngine:
    """The engine continuous dispatch drives, over the stand-in, with the step counter vLLM runs get."""
    return GenerateEngine(
        SimpleNamespace(llm_engine=stand_in),
        prompts=None,  # type: ignore[arg-type]  # every request arrives prepared
        sampling_params=lambda spec: None,
        info=EngineInfo(kind="stand-in", model="stand-in"),
        steps=StepCounter(stand_in),
        engine_input=lambda prompt: prompt,
    )


def run(lengths: list[int], cap: int, refused: frozenset[int] = frozenset()) -> Any:
    stand_in = StepEngine({str(index): length for index, length in enumerate(lengths)})
    engine = generate_engine(stand_in)
    queue = AdmissionQueue()
    queue.put(
        WorkItem(
            RequestSpec(index, 1, length, -1, 0),
            0.0,
            0.0,
            Prepared(None if index in refused else [1], index, None),
        )
        for index, length in enumerate(lengths)
    )
    reports = Reports(queue, len(lengths))
    dispatch_continuously(engine, queue, cast(Reporter, reports), cap)
    return SimpleNamespace(stand_in=stand_in, engine=engine, reports=reports.sent)


def test_every_seat_stays_taken_while_requests_wait_and_each_request_is_reported_once() -> None:
    lengths = [3, 5, 2, 7, 4, 4, 6, 1, 3, 5, 2, 2]
    result = run(lengths, cap=4)
    # What a loop that refills every freed seat before the next step runs: in-flight counts, and those of the
    # steps that finish requests (one report each).
    waiting = list(enumerate(lengths))
    running: dict[int, int] = {}  # request -> steps left
    in_flight_at_steps: list[int] = []
    finishing_steps: list[int] = []
    while waiting or running:
        while waiting and len(running) < 4:
            index, length = waiting.pop(0)
            running[index] = length
        in_flight_at_steps.append(len(running))
        running = {index: left - 1 for index, left in running.items()}
        if any(left == 0 for left in running.values()):
            finishing_steps.append(in_flight_at_steps[-1])
        running = {index: left for index, left in running.items() if left}
    assert result.stand_in.in_flight_at_steps == in_flight_at_steps
    assert [report.engine_batch for report in result.reports] == finishing_steps
    reported = sorted(completion.request_id for report in result.reports for completion in report.completions)
    assert reported == list(range(len(lengths)))
    completions = [completion for report in result.reports for completion in report.completions]
    assert all(completion.error is None for completion in completions)
    assert all(completion.output_tokens == lengths[completion.request_id] for completion in completions)
    # Every step is counted once, by the step counter as by the engine clock.
    assert sum(report.steps for report in result.reports) == len(in_flight_at_steps)
    assert result.engine.clock.calls == len(in_flight_at_steps)


def test_reports_tile_the_busy_time_without_overlap() -> None:
    result = run([2, 3, 4, 5, 6, 7], cap=3)
    for previous, report in zip(result.reports, result.reports[1:], strict=False):
        assert report.started_at == previous.finished_at  # the engine never went idle in between
    assert all(report.engine_seconds <= report.finished_at - report.started_at + 1e-9 for report in result.reports)


def test_a_request_the_engine_refuses_fails_alone_in_the_first_report() -> None:
    result = run([2, 2, 2, 2], cap=4, refused=frozenset({1}))
    first = {completion.request_id: completion for completion in result.reports[0].completions}
    assert "prompt too long" in (first[1].error or "")
    others = [
        completion for report in result.reports for completion in report.completions if completion.request_id != 1
    ]
    assert sorted(completion.request_id for completion in others) == [0, 2, 3]
    assert all(completion.error is None for completion in others)
    assert max(result.stand_in.in_flight_at_steps) == 3


def test_a_close_while_every_seat_is_taken_ends_dispatch_at_the_next_step() -> None:
    queue = AdmissionQueue()

    def close_at_third_step(step: int) -> None:
        if step == 3:
            queue.close()

    stand_in = StepEngine({str(index): 1000 for index in range(6)}, close_at_third_step)
    queue.put(WorkItem(RequestSpec(index, 1, 1000, -1, 0), 0.0, 0.0, Prepared([1], index, None)) for index in range(6))
    dispatch_continuously(generate_engine(stand_in), queue, cast(Reporter, Reports(queue, 6)), max_in_flight=2)
    assert stand_in.in_flight_at_steps == [2, 2, 2]  # the close is seen right after the step it came in


def test_the_engine_clock_times_each_call_and_counts_one_that_raises() -> None:
    clock = EngineClock()
    with clock:
        time.sleep(0.01)
    with pytest.raises(RuntimeError), clock:
        raise RuntimeError("engine broke")
    assert clock.calls == 2
    assert clock.seconds >= 0.01
    assert 0.0 <= clock.cpu_seconds < clock.seconds
    assert clock.last_started > 0.0
