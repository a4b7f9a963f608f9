"""The watch on the engine core's processes, with real processes that die (no vLLM needed)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import time
from types import SimpleNamespace

import pytest

from batchmark.runner.engines.base import EngineDead
from batchmark.runner.engines.core_watch import EngineCoreWatch, watch_engine_core
from batchmark.runner.lifecycle.exitstatus import describe_exit

CONTEXT = multiprocessing.get_context("spawn")
WAKE_SECONDS = 30.0  # for a hang, not speed: a spawn on two busy cores


def sleeper() -> multiprocessing.process.BaseProcess:
    process = CONTEXT.Process(target=time.sleep, args=(120,), daemon=True)
    process.start()
    return process


def test_a_killed_process_wakes_the_waiter_once_with_its_signal() -> None:
    process = sleeper()
    woken: queue.Queue[EngineDead] = queue.Queue()
    watch = EngineCoreWatch([process], woken.put_nowait)
    assert watch.death() is None
    os.kill(process.pid or 0, signal.SIGKILL)
    died = woken.get(timeout=WAKE_SECONDS)
    assert str(died) == f"vLLM's engine core process {process.pid} died (killed by SIGKILL)"
    assert watch.death() is died
    time.sleep(0.1)
    assert woken.empty()


def test_an_exit_code_is_named() -> None:
    process = CONTEXT.Process(target=sys.exit, args=(3,), daemon=True)
    process.start()
    woken: queue.Queue[EngineDead] = queue.Queue()
    EngineCoreWatch([process], woken.put_nowait)
    assert str(woken.get(timeout=WAKE_SECONDS)).endswith("died (exit code 3)")


def test_the_engine_call_that_raised_finds_the_death_before_the_watch_thread_does() -> None:
    process = sleeper()
    watch = EngineCoreWatch([process], lambda died: None)
    os.kill(process.pid or 0, signal.SIGKILL)
    process.join(WAKE_SECONDS)
    died = watch.death()  # whichever thread gets there first records it; the other finds the same
    assert died is not None
    assert "killed by SIGKILL" in str(died)


def test_processes_ended_by_a_shutdown_are_no_death() -> None:
    process = sleeper()
    woken: queue.Queue[EngineDead] = queue.Queue()
    watch = EngineCoreWatch([process], woken.put_nowait)
    watch.closing()
    process.terminate()
    process.join(WAKE_SECONDS)
    assert watch.death() is None
    with pytest.raises(queue.Empty):
        woken.get(timeout=0.2)


def test_an_engine_in_this_process_has_nothing_to_watch() -> None:
    assert watch_engine_core(SimpleNamespace()) is None  # vLLM's InprocClient: no resources, no processes
    no_processes = SimpleNamespace(resources=SimpleNamespace(engine_manager=None), outputs_queue=queue.Queue())
    assert watch_engine_core(no_processes) is None


def test_the_watch_wakes_vllms_sync_client_through_its_output_queue() -> None:
    process = sleeper()
    outputs: queue.Queue[object] = queue.Queue()
    client = SimpleNamespace(
        resources=SimpleNamespace(engine_manager=SimpleNamespace(processes=[process])), outputs_queue=outputs
    )
    watch = watch_engine_core(client)
    assert watch is not None
    process.kill()
    assert isinstance(outputs.get(timeout=WAKE_SECONDS), EngineDead)


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (0, "exit code 0"),
        (1, "exit code 1"),
        (-9, "killed by SIGKILL"),
        (-200, "killed by signal 200"),
        (None, "exit status unknown"),
    ],
)
def test_exit_codes_in_words(code: int | None, said: str) -> None:
    assert describe_exit(code) == said
