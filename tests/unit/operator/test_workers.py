"""The refresh workers: urgent calls first, FIFO within a priority, errors to the caller, a clean stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from batchmark.operator.controller.workers import ROUTINE, URGENT, PriorityWorkers, retried


def test_urgent_calls_overtake_routine_ones_queued_before_them() -> None:
    workers = PriorityWorkers(1, "test")
    gate = threading.Event()
    order: list[str] = []

    def note(tag: str) -> Callable[[], None]:
        return lambda: order.append(tag)

    try:
        blocker = workers.submit(ROUTINE, gate.wait)  # holds the only thread while the queue fills
        routine = [workers.submit(ROUTINE, note(f"routine-{index}")) for index in range(3)]
        urgent = [workers.submit(URGENT, note(f"urgent-{index}")) for index in range(2)]
        gate.set()
        for future in [blocker, *routine, *urgent]:
            future.result(timeout=10)
    finally:
        workers.shutdown()
    assert order == ["urgent-0", "urgent-1", "routine-0", "routine-1", "routine-2"]


def test_a_failing_call_hands_its_error_to_the_caller_and_the_thread_serves_on() -> None:
    workers = PriorityWorkers(1, "test")

    def fail() -> None:
        raise LookupError("gone")

    try:
        with pytest.raises(LookupError, match="gone"):
            workers.submit(URGENT, fail).result(timeout=10)
        assert workers.submit(ROUTINE, lambda: 42).result(timeout=10) == 42
    finally:
        workers.shutdown()


def test_shutdown_cancels_what_has_not_started_and_refuses_new_calls() -> None:
    workers = PriorityWorkers(1, "test")
    started, gate = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait()

    running = workers.submit(ROUTINE, hold)
    queued = workers.submit(ROUTINE, lambda: None)
    assert started.wait(timeout=10)
    workers.shutdown()
    gate.set()
    assert running.result(timeout=10) is True
    assert queued.cancelled()
    with pytest.raises(RuntimeError):
        workers.submit(URGENT, lambda: None)
    for thread in workers._threads:
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_no_priority_is_more_urgent_than_urgent() -> None:
    workers = PriorityWorkers(1, "test")
    try:
        with pytest.raises(ValueError, match="most urgent"):
            workers.submit(URGENT - 1, lambda: None)
    finally:
        workers.shutdown()


def test_a_refused_call_is_tried_again_until_it_succeeds_or_the_attempts_run_out() -> None:
    calls: list[int] = []

    def flaky(failures: int) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            calls.append(len(calls))
            if len(calls) <= failures:
                raise ConnectionError("refused")

        return call

    asyncio.run(retried(flaky(2), attempts=5, delay_seconds=0.001, retry_on=ConnectionError))
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ConnectionError, match="refused"):
        asyncio.run(retried(flaky(10), attempts=4, delay_seconds=0.001, retry_on=ConnectionError))
    assert len(calls) == 4


def test_an_error_that_is_not_retryable_ends_at_the_first_attempt() -> None:
    calls: list[int] = []

    async def broken() -> None:
        calls.append(1)
        raise KeyError("no")

    with pytest.raises(KeyError):
        asyncio.run(retried(broken, attempts=5, delay_seconds=0.001, retry_on=ConnectionError))
    assert calls == [1]
