"""An outside view of how busy vLLM is kept, installed alike in every process of every tool (a benchmark aid).

Put this folder first on ``PYTHONPATH`` and set ``BATCHMARK_PROBE_DIR``: every Python process started from
then on (the tool's own, its workers, vLLM's engine core and workers in vLLM's default multiprocessing mode)
wraps vLLM's calls as soon as vLLM's modules are imported and writes ``<pid>.json`` into that folder:

* ``calls``: [start, end] of every outermost ``LLM.generate`` or ``LLMEngine.step`` call (``time.monotonic``,
  one clock for all processes on Linux), in the process that calls vLLM's API;
* ``frontend_steps``: ``LLMEngine.step`` calls (``generate()`` runs them in a loop; continuous batching
  calls them itself);
* ``core_calls``, ``core_steps``: ``EngineCore.step`` calls that ran the model, wherever the engine core
  runs (inside the caller, or its own process);
* ``cpu``: samples every 0.1 s of [time, the process's CPU seconds, the CPU seconds that are vLLM's in this
  process, the probe's own]; vLLM's are the calling threads' CPU inside those calls, and all CPU of threads
  that are not Python threads or that vLLM started while the ``LLM`` was built.

Nothing is recorded without ``BATCHMARK_PROBE_DIR``; the tools' own code is never touched. ``analyse.py``
reads the folder.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from typing import Any, NoReturn

_DIRECTORY = os.environ.get("BATCHMARK_PROBE_DIR")
_SAMPLE_SECONDS = 0.1
_WRITE_SECONDS = 1.0
_TICKS = os.sysconf("SC_CLK_TCK")


class _Record:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[float, float]] = []
        self.frontend_steps = 0
        self.core_calls: list[tuple[float, float]] = []
        self.core_steps = 0
        self.cpu_in_calls = 0.0
        self.engine_threads: set[int] = set()  # native ids of vLLM's Python threads
        self.samples: list[tuple[float, float, float, float]] = []
        self.thread_samples: list[tuple[float, dict[str, list[Any]]]] = []
        self.probe_thread: int | None = None
        self.written = 0.0
        self.local = threading.local()

    def engine_cpu(self) -> float:
        """CPU seconds of vLLM's threads in this process: non-Python threads and vLLM's own Python threads."""
        python = {thread.native_id for thread in threading.enumerate()} - self.engine_threads
        total = 0.0
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc/self/task"):
                tid = int(name)
                if tid in python or tid == os.getpid():
                    continue
                with contextlib.suppress(OSError), open(f"/proc/self/task/{name}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / _TICKS
        return total + self.cpu_in_calls

    def sample(self) -> None:
        times = os.times()
        probe = time.thread_time()
        self.samples.append((time.monotonic(), times.user + times.system, self.engine_cpu(), probe))

    def sample_threads(self) -> None:
        """Every thread's name and CPU seconds now (at the write cadence: a sample reads one file per thread)."""
        threads: dict[str, list[Any]] = {}
        python = {str(thread.native_id): thread.name for thread in threading.enumerate()}
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc/self/task"):
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/self/task/{name}/stat") as stat:
                        text = stat.read()
                    comm = text[text.index("(") + 1 : text.rindex(")")]
                    fields = text.rsplit(")", 1)[1].split()
                    threads[name] = [python.get(name, comm), (int(fields[11]) + int(fields[12])) / _TICKS]
        self.thread_samples.append((time.monotonic(), threads))

    def dump(self) -> None:
        assert _DIRECTORY is not None
        with contextlib.suppress(OSError), open("/proc/self/cmdline", "rb") as cmdline:
            self.title = cmdline.read().split(b"\0")[0].decode(errors="replace")
        with self.lock:
            data: dict[str, Any] = {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "argv": sys.argv[:3],
                "calls": self.calls,
                "frontend_steps": self.frontend_steps,
                "core_calls": self.core_calls,
                "core_steps": self.core_steps,
                "cpu": self.samples,
                "threads": self.thread_samples,
                "title": getattr(self, "title", ""),
            }
        path = os.path.join(_DIRECTORY, f"{os.getpid()}.json")
        partial = path + ".partial"
        with open(partial, "w") as output:
            json.dump(data, output)
        os.replace(partial, path)


RECORD = _Record()


def _sampler() -> None:
    RECORD.probe_thread = threading.get_native_id()
    while True:
        RECORD.sample()
        now = time.monotonic()
        if now - RECORD.written >= _WRITE_SECONDS:
            RECORD.written = now
            RECORD.sample_threads()
            with contextlib.suppress(OSError):
                RECORD.dump()
        time.sleep(_SAMPLE_SECONDS)


def _outermost(function: Any, is_step: bool) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        local = RECORD.local
        if getattr(local, "depth", 0):
            if is_step:
                RECORD.frontend_steps += 1
            return function(*args, **kwargs)
        local.depth = 1
        cpu = time.thread_time()
        started = time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            ended = time.monotonic()
            local.depth = 0
            RECORD.cpu_in_calls += time.thread_time() - cpu
            RECORD.calls.append((started, ended))
            if is_step:
                RECORD.frontend_steps += 1

    return wrapped


def _constructor(function: Any) -> Any:
    """Python threads started while the ``LLM`` is built are vLLM's (its output handler, ...)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before = {thread.native_id for thread in threading.enumerate()}
        try:
            return function(*args, **kwargs)
        finally:
            born = {thread.native_id for thread in threading.enumerate()} - before
            RECORD.engine_threads.update(tid for tid in born if tid is not None)

    return wrapped


def _core_step(function: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        result = function(*args, **kwargs)
        executed = result[1] if isinstance(result, tuple) and len(result) == 2 else True
        if executed:
            RECORD.core_calls.append((started, time.monotonic()))
            RECORD.core_steps += 1
        return result

    return wrapped


def _patch(module_name: str, module: Any) -> None:
    if module_name == "vllm.entrypoints.llm":
        module.LLM.generate = _outermost(module.LLM.generate, is_step=False)
        module.LLM.__init__ = _constructor(module.LLM.__init__)
    elif module_name == "vllm.v1.engine.llm_engine":
        module.LLMEngine.step = _outermost(module.LLMEngine.step, is_step=True)
    elif module_name == "vllm.v1.engine.core":
        module.EngineCore.step = _core_step(module.EngineCore.step)
        if hasattr(module.EngineCore, "step_with_batch_queue"):
            module.EngineCore.step_with_batch_queue = _core_step(module.EngineCore.step_with_batch_queue)
    elif module_name == "vllm" and getattr(module, "__version__", "").endswith("+batchmark-simulated"):
        # The simulated stand-in: its LLM and its LLMEngine live in the package itself; one of its frontend
        # steps is one engine step.
        module.LLM.generate = _outermost(module.LLM.generate, is_step=False)
        module.LLM.__init__ = _constructor(module.LLM.__init__)
        module.LLMEngine.step = _outermost(module.LLMEngine.step, is_step=True)


_TARGETS = {"vllm", "vllm.entrypoints.llm", "vllm.v1.engine.llm_engine", "vllm.v1.engine.core"}


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Lets the normal machinery import a target module, then wraps its functions."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *_: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, fullname)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, original: Any, name: str) -> None:
        self._original = original
        self._name = name

    def create_module(self, spec: Any) -> Any:
        return self._original.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._original.exec_module(module)
        _patch(self._name, module)


if _DIRECTORY:
    sys.meta_path.insert(0, _PatchAfterImport())
    threading.Thread(target=_sampler, name="batchmark-probe", daemon=True).start()
    _PID = os.getpid()

    def _final() -> None:
        if os.getpid() != _PID:
            return  # a forked child holds a copy of its parent's record, not its own
        with contextlib.suppress(Exception):
            RECORD.sample()
            RECORD.sample_threads()
            RECORD.dump()

    atexit.register(_final)
    _exit = os._exit

    def _final_then_exit(status: int) -> NoReturn:
        """A process that ends with ``os._exit`` (batchmark's worker does, to skip torch's teardown) skips
        atexit: without this its last second of records, its final calls and steps, would be lost."""
        _final()
        _exit(status)

    os._exit = _final_then_exit
    with contextlib.suppress(ImportError):
        import multiprocessing.util

        # A multiprocessing child's exit runs these even where it skips atexit (fork's os._exit).
        multiprocessing.util.Finalize(None, _final, exitpriority=100)
