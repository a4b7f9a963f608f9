"""The backend object with the seed's engine lifecycle."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Sequence

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.engines.base import Completion, Engine, WorkItem
from batchmark.runner.engines.engine_args import check_engine_args
from batchmark.runner.engines.entry import EngineUnavailable
from batchmark.runner.engines.registry import engine_entry
from batchmark.runner.engines.request_format import check_request_format
from batchmark.runner.engines.streaming import StreamingEngine


class VllmPythonBatchBackend:
    """Nothing loads at construction. ``validate()`` is a cheap readiness check in the main process and
    preloads the engine in a worker process, so cold start stays out of the timed phase;
    ``_ensure_engine()`` is the idempotent fallback for a request that arrives first."""

    def __init__(self, config: BackendConfig, seed: int = 42) -> None:
        self.config = config
        self.seed = seed
        self.load_seconds: float | None = None
        self._engine: Engine | StreamingEngine | None = None
        self._load_lock = threading.Lock()

    @property
    def engine_loaded(self) -> bool:
        return self._engine is not None

    def validate(self) -> None:
        if multiprocessing.parent_process() is None:
            entry = engine_entry(self.config.engine)
            entry.check_available(self.config)
            check_engine_args(self.config, entry.check_argument)
            # A template that cannot render is a config error now, not a failure after the engine loaded.
            check_request_format(self.config.request_format)
            return
        self._ensure_engine()

    def _ensure_engine(self) -> Engine | StreamingEngine:
        with self._load_lock:
            if self._engine is None:
                started = time.monotonic()
                self._engine = self._load()
                self.load_seconds = time.monotonic() - started
            return self._engine

    def _load(self) -> Engine | StreamingEngine:
        entry = engine_entry(self.config.engine)
        if not self.config.streams:
            return entry.load(self.config, self.seed)
        if entry.load_streaming is None:
            raise EngineUnavailable(f"backend.engine: the {entry.name} engine cannot stream (kind={self.config.kind})")
        return entry.load_streaming(self.config, self.seed)

    def run_batch(self, items: Sequence[WorkItem]) -> list[Completion]:
        engine = self._ensure_engine()
        if isinstance(engine, StreamingEngine):
            raise TypeError(f"backend.kind={self.config.kind} streams its requests; it runs no batches")
        return engine.run_batch(items)

    def close(self) -> None:
        """Shut the engine down, if one was loaded; idempotent."""
        with self._load_lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
