"""The run's engine replicas (``backend.replicas``): one engine worker each, on devices of its own, fed from the
one load generator.

vLLM's offline ``LLM`` has no data parallelism, so a node's worth of throughput is N independent engines. Each
replica is an ``EngineWorker`` (its own process group, its own micro-batcher); this class gives the run the same
surface as one worker: requests go to the replica with the fewest in flight, ties in turn (as a
least-outstanding-requests load balancer in front of a fleet sends them), and every report comes back tagged with
its replica. With one replica it is a pass-through, so a run without replicas is what it always was.
"""

from __future__ import annotations

import multiprocessing.connection
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.messages import BatchReport, Drained, FromWorker, Reconfigured
from batchmark.runner.dispatch.replica_devices import ReplicaDevices
from batchmark.runner.dispatch.worker import WORKER_EXIT_SECONDS, EngineWorker, WorkerFailed, WorkerReady
from batchmark.runner.lifecycle.shutdown import StopFlag

# How long one look at a replica's pipe may read on while its messages keep coming, before the next replica's.
_READ_SECONDS = 0.005


@dataclass(frozen=True)
class ReplicasReady:
    """Every replica's engine has loaded: the first one's ready message stands for the run's engine."""

    first: WorkerReady
    replicas: list[WorkerReady]
    devices: list[ReplicaDevices]
    load_seconds: float  # from the first launch until the last replica was ready: they load side by side


class EngineReplicas:
    """Handle on the run's engine replicas; ``close()`` ends every one of them, whatever happened."""

    def __init__(self, config: BackendConfig, seed: int, devices: list[ReplicaDevices]) -> None:
        self.devices = devices
        several = len(devices) > 1
        self._workers = [
            EngineWorker(config, seed, devices=share if several else None, follow_harness_cpus=not several)
            for share in devices
        ]
        self._outstanding = [0] * len(devices)
        self._next_tie = 0  # where the search for the least loaded replica starts: ties go round
        self._failed: WorkerFailed | None = None

    @property
    def count(self) -> int:
        return len(self._workers)

    @property
    def pid(self) -> int | None:
        return self._workers[0].pid

    @property
    def device_names(self) -> list[str]:
        return [share.describe() for share in self.devices]

    @property
    def in_flight(self) -> list[int]:
        """Requests each replica was given and has not reported."""
        return list(self._outstanding)

    @property
    def pids(self) -> list[int | None]:
        return [worker.pid for worker in self._workers]

    def start(self, cancel: StopFlag | None = None) -> ReplicasReady | None:
        """Start every replica and wait until all have loaded; None when ``cancel`` was set first. The first
        replica that fails to load fails them all (WorkerFailed naming it)."""
        started = time.monotonic()
        for worker in self._workers:
            worker.launch()
        ready: dict[int, WorkerReady] = {}
        while len(ready) < len(self._workers):
            if cancel is not None and cancel.is_set():
                return None
            waiting = {self._workers[index].connection: index for index in range(self.count) if index not in ready}
            for connection in multiprocessing.connection.wait(list(waiting), timeout=0.1):
                index = waiting[connection]  # type: ignore[index]
                try:
                    loaded = self._workers[index].wait_ready(cancel)
                except WorkerFailed as error:
                    self._reraise(index, error)
                if loaded is None:
                    return None
                ready[index] = loaded
        replicas = [ready[index] for index in range(self.count)]
        load_seconds = replicas[0].load_seconds if self.count == 1 else time.monotonic() - started
        return ReplicasReady(replicas[0], replicas, self.devices, load_seconds)

    def submit(self, requests: list[tuple[RequestSpec, float]]) -> None:
        if self.count == 1:
            self._send(0, requests)
            return
        shares: list[list[tuple[RequestSpec, float]]] = [[] for _ in self._workers]
        outstanding = self._outstanding
        count = self.count
        for request in requests:
            # The least loaded, ties taken in turn: at a low rate every replica is idle when a request comes,
            # and the lowest index alone would get them all.
            index = self._next_tie
            for offset in range(1, count):
                candidate = (self._next_tie + offset) % count
                if outstanding[candidate] < outstanding[index]:
                    index = candidate
            self._next_tie = (index + 1) % count
            outstanding[index] += 1
            shares[index].append(request)
        for index, share in enumerate(shares):
            if share:
                self._send(index, share)

    def receive(self, timeout: float) -> list[FromWorker]:
        """The messages waiting on any replica, after waiting up to ``timeout`` for the first; reports carry
        their replica. A replica that failed is reported (WorkerFailed) after what the others sent meanwhile."""
        if self._failed is not None:
            raise self._failed
        if self.count == 1:
            return self._workers[0].receive(timeout)
        connections = {worker.connection: index for index, worker in enumerate(self._workers)}
        messages: list[FromWorker] = []
        for connection in multiprocessing.connection.wait(list(connections), timeout=timeout):
            index = connections[connection]  # type: ignore[index]
            try:
                received = self._workers[index].receive(0.0, read_for=_READ_SECONDS)
            except WorkerFailed as error:
                self._failed = self._name(index, error)
                continue
            messages.extend(self._tagged(index, received))
        if not messages and self._failed is not None:
            raise self._failed
        return messages

    def drain(self) -> list[BatchReport]:
        """Every replica drops its queued requests and finishes its batch in progress; their reports."""
        if self.count == 1:
            reports = self._workers[0].drain()
            self._outstanding[0] = 0
            return reports
        for index in range(self.count):
            self._call(index, lambda worker: worker.send_drain())
        return [message for message in self._await_all(Drained) if isinstance(message, BatchReport)]

    def reconfigure(self, batch_size: int, batch_timeout: float, dispatch: str) -> None:
        """Every replica feeds its engine by the new settings; call with nothing in flight."""
        if self.count == 1:
            self._workers[0].reconfigure(batch_size, batch_timeout, dispatch)
            return
        for index in range(self.count):
            self._call(index, lambda worker: worker.send_reconfigure(batch_size, batch_timeout, dispatch))
        self._await_all(Reconfigured)

    def close(self, grace: float = WORKER_EXIT_SECONDS, hurry: StopFlag | None = None) -> None:
        """End every replica: all are asked at once, then each waited for within the one ``grace``."""
        for worker in self._workers:
            worker.request_stop()
        deadline = time.monotonic() + grace
        for worker in self._workers:
            worker.close(grace=max(0.0, deadline - time.monotonic()), hurry=hurry)

    def _await_all(self, answer: type[Drained] | type[Reconfigured]) -> list[FromWorker]:
        """Read every replica until each has sent ``answer``; what came before it, tagged."""
        pending = set(range(self.count))
        messages: list[FromWorker] = []
        while pending:
            connections = {self._workers[index].connection: index for index in pending}
            for connection in multiprocessing.connection.wait(list(connections), timeout=0.1):
                index = connections[connection]  # type: ignore[index]
                try:
                    received = self._workers[index].receive(0.0, read_for=_READ_SECONDS)
                except WorkerFailed as error:
                    self._reraise(index, error)
                for message in self._tagged(index, received):
                    if isinstance(message, answer):
                        pending.discard(index)
                    else:
                        messages.append(message)
        self._outstanding = [0] * self.count
        return messages

    def _tagged(self, index: int, messages: list[FromWorker]) -> list[FromWorker]:
        tagged: list[FromWorker] = []
        for message in messages:
            if isinstance(message, BatchReport):
                self._outstanding[index] = max(0, self._outstanding[index] - len(message.completions))
                tagged.append(message._replace(replica=index))
            else:
                tagged.append(message)
        return tagged

    def _send(self, index: int, requests: list[tuple[RequestSpec, float]]) -> None:
        self._call(index, lambda worker: worker.submit(requests))

    def _call(self, index: int, action: Callable[[EngineWorker], None]) -> None:
        try:
            action(self._workers[index])
        except WorkerFailed as error:
            self._reraise(index, error)

    def _name(self, index: int, error: WorkerFailed) -> WorkerFailed:
        """The error as is with one replica; with several, naming the replica and its devices."""
        if self.count == 1:
            return error
        return WorkerFailed(f"replica {index} of {self.count} ({self.devices[index].describe()}): {error}")

    def _reraise(self, index: int, error: WorkerFailed) -> NoReturn:
        named = self._name(index, error)
        if named is error:
            raise error
        raise named from error
