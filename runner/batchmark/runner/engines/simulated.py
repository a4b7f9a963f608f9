"""An engine with vLLM's offline ``LLM.generate`` contract that models vLLM's speed instead of computing.

Inside each ``generate`` call it replays vLLM's continuous batching step by step: at most ``max_num_seqs``
sequences run at once, each step has a budget of ``max_num_batched_tokens`` tokens, running sequences are
served first (one decode token each, or the next chunk of their prefill), and waiting sequences are admitted
with chunked prefill while budget and seats remain. A prefill's last chunk samples the first output token.

A step costs ``step_fixed + batched_tokens * batched_token_cost + context_tokens * context_token_cost``.
The defaults model Qwen3-0.6B (bf16) on one H100-class GPU:

* fixed 4 ms: vLLM's measured inter-token latency for sub-1B models at batch size 1 is 3-5 ms on H100s,
  almost all of it scheduler, sampling and launch overhead rather than arithmetic;
* 3 us per batched token: 2 FLOPs x 0.6e9 parameters = 1.2 GFLOP per token, at ~400 TFLOP/s of realised
  bf16 matmul throughput (about 40% of the H100's dense peak) = 3.0 us;
* 37 ns per context token: Qwen3-0.6B keeps 28 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes
  = 112 KiB of KV cache per token, read once per step at ~3.1 TB/s of realised HBM bandwidth = 37 ns.

At 256 running sequences with 256 tokens of context each a decode step then takes
4 ms + 256 x 3 us + 65,536 x 37 ns = 7.2 ms, i.e. ~35,000 output tokens/s, in line with published offline
throughput for that model class on one H100.

Time advances on a simulated clock; the call sleeps so that wall time follows it, scaled by ``time_scale``
(0: no sleeping). Timestamps in ``RequestOutput.metrics`` are on ``time.monotonic()``, as vLLM's are.

``step_time_noise`` multiplies every step's time by a log-normal factor of mean 1 and that relative standard
deviation, from a stream seeded by ``noise_seed``: expected times stay those of the cost model, and repeated
measurements scatter by a known amount. A fast-forwarded run of k decode steps draws one factor with spread
``step_time_noise / sqrt(k)``, what the sum of k independent factors of near-equal steps has.
"""

from __future__ import annotations

import enum
import itertools
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

# vLLM's defaults for offline use on a data-centre GPU (EngineArgs: max_num_seqs 256 for the LLM class,
# chunked prefill with an 8192-token step budget), and Qwen3-0.6B's context window and vocabulary.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_MAX_MODEL_LEN = 40960
DEFAULT_VOCAB_SIZE = 151936
_FILLER_TOKEN = 13


class TokensPrompt(TypedDict):
    """vLLM's ``TokensPrompt``: a prompt given as token ids."""

    prompt_token_ids: list[int]


class RequestOutputKind(enum.IntEnum):
    """vLLM's ``RequestOutputKind``: what each streamed output of a request carries."""

    CUMULATIVE = 0  # every token so far
    DELTA = 1  # the tokens new since the previous output
    FINAL_ONLY = 2  # one output, at the end


@dataclass
class SamplingParams:
    """The subset of vLLM's ``SamplingParams`` that a length-pinned benchmark uses."""

    max_tokens: int | None = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 1.0
    detokenize: bool = True
    seed: int | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE


@dataclass
class RequestStateStats:
    """vLLM v1's per-request stats; ``*_ts`` are ``time.monotonic()`` readings, arrival_time is wall time."""

    num_generation_tokens: int = 0
    arrival_time: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    first_token_latency: float = 0.0
    is_corrupted: bool = False


@dataclass
class CompletionOutput:
    """vLLM's ``CompletionOutput``."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    """vLLM's ``RequestOutput``."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestStateStats | None = None
    num_cached_tokens: int = 0


@dataclass
class _Sequence:
    index: int
    prompt_len: int
    max_tokens: int
    computed: int = 0
    generated: int = 0
    scheduled_at: float | None = None
    first_token_at: float = 0.0
    finished_at: float = 0.0
    # Set for requests added one by one through ``llm_engine`` (continuous dispatch); simulated seconds.
    request_id: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)
    queued_at: float = 0.0


@dataclass
class CostModel:
    """Seconds per engine step as a linear function of the step's work."""

    step_fixed: float
    per_batched_token: float
    per_context_token: float

    def step(self, batched_tokens: int, context_tokens: int) -> float:
        return self.step_fixed + batched_tokens * self.per_batched_token + context_tokens * self.per_context_token


@dataclass
class _Clock:
    """Simulated seconds since the call began, with wall time kept in step by sleeping."""

    wall_start: float
    time_scale: float
    now: float = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        if self.time_scale > 0:
            delay = self.wall_start + self.now * self.time_scale - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def stamp(self, simulated: float) -> float:
        return self.wall_start + simulated * self.time_scale


@dataclass
class SimulatedLLM:
    """Stands in for ``vllm.LLM``: same constructor keywords it needs, same ``generate`` contract."""

    model: str
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    time_scale: float = 1.0
    step_fixed_seconds: float = 0.004
    batched_token_seconds: float = 3.0e-6
    context_token_seconds: float = 3.7e-8
    step_time_noise: float = 0.0
    noise_seed: int = 0
    vocab_size: int = DEFAULT_VOCAB_SIZE
    engine_args: dict[str, Any] = field(default_factory=dict)
    # vLLM's per-request stats (RequestOutput.metrics): None with them off, as vLLM's disable_log_stats=True gives.
    log_stats: bool = True
    _request_counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    steps: int = field(default=0, init=False)  # engine steps run so far, through generate() and llm_engine alike

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1 or self.max_model_len < 1:
            raise ValueError("max_num_seqs, max_num_batched_tokens and max_model_len must be positive")
        if not 0 <= self.step_time_noise <= 1:
            raise ValueError("step_time_noise must be between 0 and 1")
        self.cost = CostModel(self.step_fixed_seconds, self.batched_token_seconds, self.context_token_seconds)
        self._noise = np.random.default_rng(self.noise_seed)
        self.simulated_seconds = 0.0  # engine time spent in steps so far, noise included
        self._llm_engine: SimulatedLLMEngine | None = None

    @property
    def llm_engine(self) -> SimulatedLLMEngine:
        """vLLM's ``LLM.llm_engine``: requests added one at a time and advanced step by step."""
        if self._llm_engine is None:
            self._llm_engine = SimulatedLLMEngine(self)
        return self._llm_engine

    def generate(
        self,
        prompts: Sequence[TokensPrompt] | TokensPrompt,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Run the prompts to completion and return their outputs in input order, as vLLM does."""
        prompt_list = [prompts] if isinstance(prompts, dict) else list(prompts)
        params_list = self._params_per_prompt(prompt_list, sampling_params)
        sequences = [
            self._validated(index, prompt, params)
            for index, (prompt, params) in enumerate(zip(prompt_list, params_list, strict=True))
        ]
        wall_start = time.monotonic()
        arrival_wall = time.time()
        clock = _Clock(wall_start=wall_start, time_scale=self.time_scale)
        self._run(sequences, clock)
        return [self._output(sequence, prompt_list[sequence.index], clock, arrival_wall) for sequence in sequences]

    def _params_per_prompt(
        self, prompts: list[TokensPrompt], sampling_params: SamplingParams | Sequence[SamplingParams] | None
    ) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams()] * len(prompts)
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        return list(sampling_params)

    def _noisy(self, seconds: float, steps: int) -> float:
        """``seconds`` of ``steps`` engine steps with the step-time noise applied."""
        if self.step_time_noise > 0:
            relative = self.step_time_noise / math.sqrt(steps)
            sigma = math.sqrt(math.log1p(relative * relative))
            seconds *= float(self._noise.lognormal(-sigma * sigma / 2, sigma))
        self.simulated_seconds += seconds
        return seconds

    def _validated(self, index: int, prompt: TokensPrompt, params: SamplingParams) -> _Sequence:
        token_ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
        if token_ids is None:
            raise TypeError("the simulated engine takes TokensPrompt inputs ({'prompt_token_ids': [...]})")
        prompt_len = len(token_ids)
        if prompt_len == 0:
            raise ValueError("The decoder prompt cannot be empty")
        if prompt_len > self.max_model_len:
            raise ValueError(
                f"The decoder prompt (length {prompt_len}) is longer than the maximum model length of "
                f"{self.max_model_len}. Make sure that `max_model_len` is no smaller than the number of "
                "text tokens."
            )
        max_tokens = params.max_tokens if params.max_tokens is not None else self.max_model_len - prompt_len
        # Like vLLM, generation stops at the context window even when more tokens were asked for.
        max_tokens = max(1, min(max_tokens, self.max_model_len - prompt_len))
        return _Sequence(index=index, prompt_len=prompt_len, max_tokens=max_tokens)

    def _run(self, sequences: list[_Sequence], clock: _Clock) -> None:
        waiting: deque[_Sequence] = deque(sequences)
        running: list[_Sequence] = []
        while waiting or running:
            only_decoding = (
                (not waiting or len(running) >= self.max_num_seqs)
                and running
                and len(running) <= self.max_num_batched_tokens
                and all(seq.computed >= seq.prompt_len for seq in running)
            )
            if only_decoding:
                running = self._decode_until_next_finish(running, clock)
            else:
                running = self._step(waiting, running, clock)

    def _step(self, waiting: deque[_Sequence], running: list[_Sequence], clock: _Clock) -> list[_Sequence]:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[_Sequence, int]] = []
        for seq in running:
            chunk = min(seq.prompt_len - seq.computed, budget) if seq.computed < seq.prompt_len else 1
            if chunk <= 0 or chunk > budget:
                break
            scheduled.append((seq, chunk))
            budget -= chunk
        while waiting and len(running) < self.max_num_seqs and budget > 0:
            seq = waiting.popleft()
            seq.scheduled_at = clock.now
            chunk = min(seq.prompt_len, budget)
            running.append(seq)
            scheduled.append((seq, chunk))
            budget -= chunk
        batched = sum(chunk for _, chunk in scheduled)
        # Attention reads every token already in the sequence's KV cache plus the ones this step adds.
        context = sum(seq.computed + seq.generated + chunk for seq, chunk in scheduled)
        clock.advance(self._noisy(self.cost.step(batched, context), 1))
        self.steps += 1
        for seq, chunk in scheduled:
            if seq.computed < seq.prompt_len:
                seq.computed += chunk
                if seq.computed < seq.prompt_len:
                    continue
            seq.generated += 1
            if seq.generated == 1:
                seq.first_token_at = clock.now
            if seq.generated >= seq.max_tokens:
                seq.finished_at = clock.now
        return [seq for seq in running if seq.generated < seq.max_tokens]

    def _decode_until_next_finish(self, running: list[_Sequence], clock: _Clock) -> list[_Sequence]:
        """Fast-forward steps in which every running sequence decodes one token and none finishes early."""
        steps = min(seq.max_tokens - seq.generated for seq in running)
        count = len(running)
        # A decode step reads each sequence's whole context: prompt, tokens so far and the one it adds.
        context_first = sum(seq.prompt_len + seq.generated + 1 for seq in running)
        context_total = steps * context_first + count * steps * (steps - 1) // 2
        clock.advance(
            self._noisy(
                steps * (self.cost.step_fixed + count * self.cost.per_batched_token)
                + context_total * self.cost.per_context_token,
                steps,
            )
        )
        self.steps += steps
        for seq in running:
            seq.generated += steps
            if seq.generated >= seq.max_tokens:
                seq.finished_at = clock.now
        return [seq for seq in running if seq.generated < seq.max_tokens]

    def _output(self, seq: _Sequence, prompt: TokensPrompt, clock: _Clock, arrival_wall: float) -> RequestOutput:
        scheduled = clock.stamp(seq.scheduled_at or 0.0)
        first = clock.stamp(seq.first_token_at)
        last = clock.stamp(seq.finished_at)
        stats = RequestStateStats(
            num_generation_tokens=seq.generated,
            arrival_time=arrival_wall,
            queued_ts=clock.wall_start,
            scheduled_ts=scheduled,
            first_token_ts=first,
            last_token_ts=last,
            first_token_latency=first - clock.wall_start,
        )
        return RequestOutput(
            request_id=str(next(self._request_counter)),
            prompt=None,
            prompt_token_ids=prompt["prompt_token_ids"],
            prompt_logprobs=None,
            outputs=[
                CompletionOutput(index=0, text="", token_ids=[_FILLER_TOKEN] * seq.generated, finish_reason="length")
            ],
            finished=True,
            metrics=stats if self.log_stats else None,
        )


class SimulatedLLMEngine:
    """vLLM's ``LLMEngine`` step API (``add_request``, ``step``, ``has_unfinished_requests``) on the cost model.

    Unlike ``generate``, which replays a closed set of requests, this keeps one scheduler state across calls:
    requests join the running batch at the next step, as they do in vLLM's continuous batching. Each ``step``
    runs one engine step and returns the requests it finished. The simulated clock never runs behind wall
    time (scaled): time spent idle or between steps passes for the engine too, so timestamps stay ordered
    (queued <= scheduled <= first token <= last token) on ``time.monotonic()``.
    """

    def __init__(self, llm: SimulatedLLM, clock: _Clock | None = None) -> None:
        self._llm = llm
        # The async engine (simulated_async.py) gives a clock that does not sleep: it waits on its event loop.
        self._clock = clock or _Clock(wall_start=time.monotonic(), time_scale=llm.time_scale)
        self._arrival_wall = time.time() - time.monotonic()  # wall = monotonic + offset
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._index = itertools.count()

    def _catch_up(self) -> None:
        clock = self._clock
        if clock.time_scale > 0:
            clock.now = max(clock.now, (time.monotonic() - clock.wall_start) / clock.time_scale)

    def add_request(
        self, request_id: str, prompt: TokensPrompt, params: SamplingParams, arrival_time: float | None = None
    ) -> None:
        """Queue one request; an invalid prompt raises here, for that request alone, as in vLLM."""
        self.queue(request_id, prompt, params)

    def queue(self, request_id: str, prompt: TokensPrompt, params: SamplingParams) -> _Sequence:
        """``add_request``, returning the request's sequence (the async engine follows its tokens)."""
        sequence = self._llm._validated(next(self._index), prompt, params)
        self._catch_up()
        sequence.request_id = request_id
        sequence.prompt_token_ids = list(prompt["prompt_token_ids"])
        sequence.queued_at = self._clock.now
        self._waiting.append(sequence)
        return sequence

    def has_unfinished_requests(self) -> bool:
        return bool(self._waiting or self._running)

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        """Drop requests by id, as vLLM's ``abort_request`` does; unknown ids are ignored."""
        dropped = set(request_ids)
        self._waiting = deque(seq for seq in self._waiting if seq.request_id not in dropped)
        self._running = [seq for seq in self._running if seq.request_id not in dropped]

    def step(self) -> list[RequestOutput]:
        """One engine step; returns the outputs of the requests it finished."""
        if not self.has_unfinished_requests():
            return []
        before = self._running + list(self._waiting)
        self.advance()
        still = {id(seq) for seq in self._running} | {id(seq) for seq in self._waiting}
        return [self._output(seq) for seq in before if id(seq) not in still]

    def advance(self) -> float:
        """One engine step, without building outputs; the step's modelled end on ``time.monotonic()``."""
        self._catch_up()
        self._running = self._llm._step(self._waiting, self._running, self._clock)
        return self._clock.stamp(self._clock.now)

    def stats(self, seq: _Sequence) -> RequestStateStats:
        """vLLM's per-request stats of a request that joined the running scheduler, on ``time.monotonic()``."""
        stamp = self._clock.stamp
        first, queued = stamp(seq.first_token_at), stamp(seq.queued_at)
        return RequestStateStats(
            num_generation_tokens=seq.generated,
            arrival_time=queued + self._arrival_wall,
            queued_ts=queued,
            scheduled_ts=stamp(seq.scheduled_at or seq.queued_at),
            first_token_ts=first,
            last_token_ts=stamp(seq.finished_at),
            first_token_latency=first - queued,
        )

    def _output(self, seq: _Sequence) -> RequestOutput:
        stats = self.stats(seq)
        return RequestOutput(
            request_id=seq.request_id,
            prompt=None,
            prompt_token_ids=seq.prompt_token_ids,
            prompt_logprobs=None,
            outputs=[
                CompletionOutput(index=0, text="", token_ids=[_FILLER_TOKEN] * seq.generated, finish_reason="length")
            ],
            finished=True,
            metrics=stats if self._llm.log_stats else None,
        )
