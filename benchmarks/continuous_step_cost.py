"""Continuous dispatch's own CPU per engine step, against a plain ``add_request``/``step()`` loop (a benchmark).

In vLLM's default mode the thread calling ``llm_engine.step()`` waits in it while the engine core computes, so
between two steps the harness's code runs on caches the engine's processes have just used: its cost per step is
several times what a tight loop measures. Here both loops drive the same stand-in for vLLM's ``LLMEngine``
(``add_request``, and ``step()`` returning the finished requests' ``RequestOutput``-shaped objects, as with
``RequestOutputKind.FINAL_ONLY``) whose step blocks for ``--step-ms`` in ``time.sleep``, as the caller blocks on
the engine core's output queue. The stand-in times its own step with ``time.thread_time`` as the probe of
``vs_guidellm/engine_busy.py`` does, and what is reported is the calling thread's CPU outside it, per step:

* ``batchmark``: ``dispatch_continuously`` over ``GenerateEngine`` with the step counter vLLM runs get, a real
  ``Reporter`` sending each report through a pipe to another process, and ``HarnessUsage``;
* ``plain loop``: the loop of ``vs_guidellm/plain_loop.py``.

    .venv/bin/python benchmarks/continuous_step_cost.py --repeat 5

Another checkout's runner can be measured by putting its ``runner`` directory first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Run as a script from anywhere: the repository's root first, for plain_loop.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batchmark.runner.data.requests import RequestSpec
from batchmark.runner.dispatch.continuous import AdmissionQueue, dispatch_continuously
from batchmark.runner.dispatch.harness_usage import HarnessUsage
from batchmark.runner.dispatch.messages import BatchReport
from batchmark.runner.dispatch.reporter import Outgoing, Reporter
from batchmark.runner.engines.base import EngineInfo, GenerateEngine, Prepared, WorkItem
from batchmark.runner.engines.vllm_engine import StepCounter
from benchmarks.vs_guidellm.plain_loop import engine_loop

PROMPT = [1] * 16


class BlockingEngine:
    """``add_request`` and ``step`` as vLLM's ``LLMEngine`` has them; each step decodes one token of every
    request and blocks ``step_seconds``. Output lengths vary by up to 15 tokens, so requests finish on different
    steps, as they do on the real engine."""

    def __init__(self, output_tokens: int, step_seconds: float) -> None:
        self.output_tokens = output_tokens
        self.step_seconds = step_seconds
        self.left: dict[str, int] = {}
        self.added = 0
        self.cpu_in_steps = 0.0
        self.steps = 0

    @property
    def renderer(self) -> SimpleNamespace:
        """vLLM's renderer, for the plain loop: these prompts need no rendering."""
        return SimpleNamespace(render_cmpl=lambda prompts: prompts)

    def add_request(self, request_id: str, prompt: Any, params: Any) -> None:
        self.left[request_id] = self.output_tokens - self.added % 16
        self.added += 1

    def step(self) -> list[Any]:
        cpu = time.thread_time()
        try:
            time.sleep(self.step_seconds)
            finished = []
            for request_id in list(self.left):
                self.left[request_id] -= 1
                if self.left[request_id] == 0:
                    del self.left[request_id]
                    finished.append(
                        SimpleNamespace(
                            request_id=request_id,
                            finished=True,
                            prompt_token_ids=PROMPT,
                            outputs=[SimpleNamespace(token_ids=[0] * self.output_tokens, finish_reason="length")],
                            metrics=None,
                        )
                    )
            self.steps += 1
            return finished
        finally:
            self.cpu_in_steps += time.thread_time() - cpu


class ClosingReporter(Reporter):
    """Closes the queue once every request was reported, as the receiver thread does at a run's end."""

    def __init__(self, connection: multiprocessing.connection.Connection, queue: AdmissionQueue, requests: int) -> None:
        super().__init__(connection)
        self._admission, self._left = queue, requests

    def send(self, message: Outgoing) -> None:
        super().send(message)
        if isinstance(message, BatchReport):
            self._left -= len(message.completions)
            if self._left == 0:
                self._admission.close()


def _drain(connection: multiprocessing.connection.Connection, sending_end: Any) -> None:
    sending_end.close()  # the parent's end, inherited: without closing it here, the pipe never reaches EOF
    while True:
        try:
            connection.recv()
        except EOFError:
            return


def batchmark_step_cpu(requests: int, output_tokens: int, batch_size: int, step_seconds: float) -> float:
    """CPU seconds per step of continuous dispatch's thread, outside the engine's step."""
    sending, receiving = multiprocessing.Pipe()
    drain = multiprocessing.Process(target=_drain, args=(receiving, sending))
    drain.start()
    receiving.close()
    stand_in = BlockingEngine(output_tokens, step_seconds)
    info = EngineInfo(kind="stand-in", model="stand-in")
    engine = GenerateEngine(
        SimpleNamespace(llm_engine=stand_in),
        prompts=None,  # type: ignore[arg-type]  # requests arrive prepared, as the receiver thread leaves them
        sampling_params=lambda spec: None,
        info=info,
        steps=StepCounter(stand_in),
        engine_input=lambda prompt: prompt,
    )
    queue = AdmissionQueue()
    queue.put(
        WorkItem(RequestSpec(index, len(PROMPT), output_tokens, -1, 0), 0.0, 0.0, Prepared(PROMPT, index, None))
        for index in range(requests)
    )
    reporter = ClosingReporter(sending, queue, requests)
    usage = HarnessUsage(engine.clock, [reporter.thread])
    started = time.thread_time()
    dispatch_continuously(engine, queue, reporter, batch_size, usage)
    spent = time.thread_time() - started
    reporter.close()
    sending.close()
    drain.join()
    return (spent - stand_in.cpu_in_steps) / stand_in.steps


def plain_loop_step_cpu(requests: int, output_tokens: int, batch_size: int, step_seconds: float) -> float:
    """The same for vs_guidellm/plain_loop.py's ``engine_loop``."""
    engine = BlockingEngine(output_tokens, step_seconds)
    started = time.thread_time()
    engine_loop(SimpleNamespace(llm_engine=engine), [PROMPT] * requests, None, batch_size)
    spent = time.thread_time() - started
    return (spent - engine.cpu_in_steps) / engine.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=3.0, help="how long each step blocks (B = 8 here: ~3 ms)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    shape = (args.requests, args.output_tokens, args.batch_size, args.step_ms / 1000)
    ours: list[float] = []
    plain: list[float] = []
    for _ in range(args.repeat):  # alternating, so both see the machine alike
        ours.append(batchmark_step_cpu(*shape))
        plain.append(plain_loop_step_cpu(*shape))
    for name, values in (("batchmark", ours), ("plain loop", plain)):
        micros = sorted(1e6 * value for value in values)
        print(
            f"{name}: {statistics.median(micros):.1f} µs a step outside it, median of {len(micros)} "
            f"[{micros[0]:.1f}-{micros[-1]:.1f}]"
        )


if __name__ == "__main__":
    main()
