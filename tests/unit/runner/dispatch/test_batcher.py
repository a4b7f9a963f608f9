import threading
import time

from batchmark.runner.dispatch.batcher import MicroBatcher


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_batch_is_due_when_its_last_request_arrives() -> None:
    clock = FakeClock()
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=3, batch_timeout=5.0, clock=clock)
    batcher.put([1, 2])
    clock.now = 101.0
    batcher.put([3, 4])
    assert batcher.ready_at() == 101.0
    batch = batcher.next_batch()
    assert batch is not None
    assert batch.items == [1, 2, 3]
    assert batch.full
    assert batch.closed_at == 101.0


def test_a_partial_batch_is_due_timeout_after_its_first_request() -> None:
    clock = FakeClock()
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=8, batch_timeout=0.5, clock=clock)
    batcher.put([1])
    clock.now = 100.2
    batcher.put([2])
    assert batcher.ready_at() == 100.5
    clock.now = 100.5
    batch = batcher.next_batch()
    assert batch is not None
    assert batch.items == [1, 2]  # effective size: what arrived within the window
    assert not batch.full


def test_requests_that_waited_for_a_busy_engine_go_at_once() -> None:
    clock = FakeClock()
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=4, batch_timeout=0.01, clock=clock)
    batcher.put([1])
    clock.now = 103.0  # the engine was busy for three seconds
    batcher.put([2])
    batch = batcher.next_batch()
    assert batch is not None
    assert batch.items == [1, 2]
    assert batch.closed_at == 103.0  # the late member completed the batch


def test_partial_batch_flushes_in_real_time() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=100, batch_timeout=0.05)
    started = time.monotonic()
    batcher.put([1, 2, 3])
    batch = batcher.next_batch()
    waited = time.monotonic() - started
    assert batch is not None
    assert batch.items == [1, 2, 3]
    assert waited >= 0.05


def test_a_full_batch_does_not_wait_for_the_timeout() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=2, batch_timeout=60.0)
    result: list[list[int]] = []

    def take() -> None:
        batch = batcher.next_batch()
        assert batch is not None
        result.append(batch.items)

    taker = threading.Thread(target=take)
    taker.start()
    batcher.put([1])
    batcher.put([2])
    taker.join(timeout=5)
    assert result == [[1, 2]]


def test_drain_waits_for_the_batch_in_progress_and_drops_the_queue() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=2, batch_timeout=60.0)
    batcher.put([1, 2, 3])
    assert batcher.next_batch() is not None
    finished = threading.Event()

    def finish_later() -> None:
        time.sleep(0.05)
        finished.set()
        batcher.task_done()

    threading.Thread(target=finish_later).start()
    assert batcher.drain() == [3]
    assert finished.is_set()
    assert len(batcher) == 0


def test_close_ends_the_consumer() -> None:
    batcher: MicroBatcher[int] = MicroBatcher(batch_size=2, batch_timeout=60.0)
    batcher.put([1])
    assert batcher.close() == [1]
    assert batcher.next_batch() is None
