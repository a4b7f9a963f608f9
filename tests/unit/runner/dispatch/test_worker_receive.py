"""Reading the engine worker's reports ends by its timeout, however fast they come."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from batchmark.runner.dispatch.messages import Crashed, Drained
from batchmark.runner.dispatch.worker import WorkerFailed, _raise_if_crashed, read_waiting

FLOOD_SECONDS = 20.0
READ_SECONDS = 0.002  # what each message costs the reader: it reads slower than the sender sends


def _read_slowly() -> Drained:
    time.sleep(READ_SECONDS)
    return Drained()


class SlowToRead:
    """Sent like any message; unpickling it takes READ_SECONDS, as reading does for a process short of CPU."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_read_slowly, ())


def test_a_read_ends_by_its_timeout_while_messages_keep_coming() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    stop = threading.Event()

    def flood() -> None:
        ends = time.monotonic() + FLOOD_SECONDS
        while not stop.is_set() and time.monotonic() < ends:
            writer.send(SlowToRead())

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    try:
        messages = read_waiting(reader, 0.2)
        still_coming = sender.is_alive()
    finally:
        stop.set()
        while sender.is_alive():  # a send blocked on a full pipe needs room to see the stop
            while reader.poll(0.01):
                reader.recv_bytes()
        writer.close()
        reader.close()
    assert messages, "nothing was read although messages were waiting"
    assert still_coming, f"the read went on until the messages stopped coming ({FLOOD_SECONDS} s)"


def test_a_read_takes_what_is_waiting_and_stops_at_a_crash_report() -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    for message in (Drained(), Drained(), Crashed("Traceback: boom"), Drained()):
        writer.send(message)
    first = read_waiting(reader, 0.2)
    rest = read_waiting(reader, 0.2)
    assert [type(message) for message in first] == [Drained, Drained, Crashed]
    assert [type(message) for message in rest] == [Drained]
    assert read_waiting(reader, 0.01) == []


def test_an_engine_death_is_reported_by_its_reason_alone() -> None:
    with pytest.raises(WorkerFailed, match=r"^vLLM's engine core process 7 died \(killed by SIGKILL\)$"):
        _raise_if_crashed(Crashed("", reason="vLLM's engine core process 7 died (killed by SIGKILL)"))
    with pytest.raises(WorkerFailed, match=r"^the engine's process crashed: ValueError: boom$"):
        _raise_if_crashed(Crashed("Traceback (most recent call last):\nValueError: boom\n"))
