"""The runner's configuration: one set of models for the CLI, config files, the CRD schema and the docs.

Field names are snake_case (GuideLLM's spellings); every model also accepts the camelCase form that
Kubernetes resources use. Unknown keys are errors.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

log = logging.getLogger(__name__)


class ConfigModel(BaseModel):
    """Base of every config model: strict about unknown keys, bilingual about case."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        # An infinite or NaN number never makes a run that ends or a figure that means anything.
        allow_inf_nan=False,
    )


# Bounds beyond which a value can never work: waits this long overflow the clocks' arithmetic long before a
# run could use them, and no model has a context window of more tokens than this (the largest offered today
# take 10 million).
MAX_SECONDS = 366 * 24 * 3600.0
MAX_CONTEXT_TOKENS = 10_000_000
# Seeds: what numpy takes (any whole number from 0) and a Kubernetes integer (int64) holds.
MAX_SEED = 2**63 - 1
# Arrays sized by these are allocated whole before the run: a bound keeps a typo from exhausting memory.
MAX_SAMPLES = 1_000_000
MAX_ERROR_WINDOW = 1_000_000
# A rate beyond this issues every request at once: use the throughput profile.
MAX_RATE = 1e9
# Per-request records are kept in memory and in every output; a BatchBenchmark's results ConfigMap holds 1 MiB.
MAX_SAMPLE_REQUESTS = 10_000
# A run of more benchmarks than this (sweep points times the profile's benchmarks) is refused: each one is a
# full benchmark under the constraints, and a grid with a rate sweep grows multiplicatively.
MAX_SWEEP_BENCHMARKS = 64
# Repeats measure each benchmark again on the same engine load: a few give an interval, dozens add little (the
# interval narrows with the square root), and every repeat is a full benchmark under the constraints.
MAX_REPEATS = 30
MAX_BENCHMARKS = MAX_SWEEP_BENCHMARKS * 4
MAX_CONSTRAINTS = 10
# A sweep point's warm-up is submitted at once: its requests are in memory together. A warm-up fills caches and
# compiles kernels; a few hundred requests do that.
MAX_SWEEP_WARMUP_REQUESTS = 100_000
# Prices and counts beyond these are typing mistakes, and would overflow the cost arithmetic to infinity.
MAX_GPU_COST_PER_HOUR = 1e9
MAX_GPUS = 100_000


# --- engine and backend -------------------------------------------------------------------------------------


class SimulationConfig(ConfigModel):
    """Cost model of the simulated engine; the defaults model a ~0.6B model on one H100-class GPU."""

    time_scale: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description="Multiplier on simulated step times when sleeping; 0 computes timings without sleeping.",
    )
    step_fixed_seconds: float = Field(
        default=0.004,
        ge=0,
        le=3600,
        description="Fixed cost of one engine step (scheduling, kernel launches, sampling), seconds.",
    )
    batched_token_seconds: float = Field(
        default=3.0e-6,
        ge=0,
        le=3600,
        description="Cost per token processed in a step (prefill chunk or decode token), seconds.",
    )
    context_token_seconds: float = Field(
        default=3.7e-8,
        ge=0,
        le=3600,
        description="Cost per token of KV cache read by attention in a step, seconds.",
    )
    step_time_noise: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Relative standard deviation of each engine step's time: every step is multiplied by a"
        " log-normal factor of mean 1 and this spread, drawn from noise_seed (0: no noise). Models a shared"
        " machine, so that repeated measurements differ by a known amount.",
    )
    noise_seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seed of the step-time noise; each engine load draws one stream."
    )
    gpu_name: str = Field(
        default="simulated H100-class GPU",
        description="Name reported for the simulated device.",
    )
    load_seconds: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="Seconds the engine takes to load, as a real one reads its weights (0: at once); scaled by"
        " nothing, so that the loading phase can be observed and interrupted.",
    )


class VllmPythonBatchBackendConfig(ConfigModel):
    """GuideLLM's ``vllm_python_batch`` backend: vLLM's ``LLM`` in-process, fed in micro-batches."""

    kind: Literal["vllm_python_batch"] = Field(
        default="vllm_python_batch", description="Backend type; only vllm_python_batch exists."
    )
    model: str = Field(
        min_length=1,
        description="Hugging Face model id or local path; wins over vllm_config.model.",
    )
    batch_size: int = Field(
        default=32, ge=1, description="Requests per micro-batch; a batch that fills is dispatched at once."
    )
    batch_timeout: float = Field(
        default=0.01,
        gt=0,
        le=MAX_SECONDS,
        description="Seconds after a batch's first request arrived before a partial batch is dispatched.",
    )
    request_format: str = Field(
        default="default-template",
        description=(
            "How prompts are built: 'plain' (token ids, no template), 'default-template' (the tokenizer's"
            " chat template) or a Jinja2 chat template given inline or as a file path."
        ),
    )
    vllm_config: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM EngineArgs by their Python names (e.g. gpu_memory_utilization, max_model_len)."
        " disable_log_stats is true unless given or an SLO targets ttft or tpot, as vllm.LLM runs: false turns"
        " on vLLM's per-request stats, which give TTFT and time per output token at a cost in CPU.",
    )
    dispatch: Literal["batch", "continuous"] = Field(
        default="batch",
        description=(
            "'batch' (the seed's behaviour): micro-batches of batch_size through LLM.generate(), one at a time."
            " 'continuous': one engine thread adds requests to vLLM's scheduler while it runs, so the engine"
            " never waits for a batch to fill or drain; batch_size then caps the requests in flight and"
            " batch_timeout is unused."
        ),
    )
    engine: Literal["vllm", "simulated"] = Field(
        default="vllm",
        description="'vllm' runs the real engine; 'simulated' models its speed without a GPU.",
    )
    simulation: SimulationConfig = Field(
        default_factory=SimulationConfig, description="Cost model used when engine is 'simulated'."
    )

    @field_validator("vllm_config")
    @classmethod
    def _engine_args_can_work(cls, vllm_config: dict[str, Any]) -> dict[str, Any]:
        """Sizes that no engine accepts fail here, in milliseconds, not inside the engine after minutes."""
        for name, value in vllm_config.items():
            bound = ENGINE_ARG_BOUNDS.get(name)
            if bound is None:
                continue
            try:
                bound.validate_python(value)
            except ValidationError as error:
                problem = error.errors()[0]["msg"]
                raise PydanticCustomError(
                    "engine_argument",
                    "{name}: {problem} (got {value})",
                    {"name": name, "problem": problem, "value": repr(value)},
                ) from None
        return vllm_config

    @model_validator(mode="after")
    def _top_level_model_wins(self) -> VllmPythonBatchBackendConfig:
        configured = self.vllm_config.get("model")
        if configured is not None and configured != self.model:
            log.warning(
                "backend.vllm_config.model=%r is ignored: backend.model=%r takes precedence",
                configured,
                self.model,
            )
        return self

    def engine_args(self) -> dict[str, Any]:
        """The keyword arguments for ``vllm.LLM`` (or the simulated engine): vllm_config with our model."""
        return {**self.vllm_config, "model": self.model}

    def with_engine_timings(self) -> VllmPythonBatchBackendConfig:
        """This backend with vLLM's per-request stats turned on, unless vllm_config already decides."""
        if "disable_log_stats" in self.vllm_config:
            return self
        return self.model_copy(update={"vllm_config": {**self.vllm_config, "disable_log_stats": False}})


BackendConfig = VllmPythonBatchBackendConfig

_Positive = Annotated[int, Field(ge=1, strict=True)]
_NotNegative = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]
# vLLM's engine arguments whose values are obviously wrong outside these bounds, whatever the model or GPU;
# the simulated engine reads the first three. Other names and values are vLLM's to judge.
ENGINE_ARG_BOUNDS: dict[str, TypeAdapter[Any]] = {
    "max_num_seqs": TypeAdapter(_Positive),
    "max_num_batched_tokens": TypeAdapter(_Positive),
    # -1: as long as fits in memory; vLLM also reads strings such as "32k".
    "max_model_len": TypeAdapter(Annotated[int, Field(ge=1, strict=True)] | Literal[-1] | str),
    "tensor_parallel_size": TypeAdapter(_Positive),
    "pipeline_parallel_size": TypeAdapter(_Positive),
    "data_parallel_size": TypeAdapter(_Positive),
    "block_size": TypeAdapter(_Positive),
    "kv_cache_memory_bytes": TypeAdapter(_Positive),
    "gpu_memory_utilization": TypeAdapter(Annotated[float, Field(gt=0, le=1, strict=True, allow_inf_nan=False)]),
    "swap_space": TypeAdapter(_NotNegative),
    "cpu_offload_gb": TypeAdapter(_NotNegative),
}


# --- data ---------------------------------------------------------------------------------------------------


class SyntheticTextDataConfig(ConfigModel):
    """Synthetic prompts of exact token lengths with pinned output lengths."""

    kind: Literal["synthetic_text"] = Field(default="synthetic_text", description="Data source type.")
    prompt_tokens: int = Field(ge=1, le=MAX_CONTEXT_TOKENS, description="Mean prompt length, tokens.")
    prompt_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of prompt length."
    )
    prompt_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest prompt, tokens."
    )
    prompt_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest prompt, tokens."
    )
    output_tokens: int = Field(
        ge=1, le=MAX_CONTEXT_TOKENS, description="Mean output length, tokens (pinned with ignore_eos)."
    )
    output_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of output length."
    )
    output_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest output, tokens."
    )
    output_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest output, tokens."
    )
    samples: int = Field(
        default=1000, ge=1, le=MAX_SAMPLES, description="Distinct length pairs drawn; requests cycle through them."
    )
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed for lengths and prompt content.")
    prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_CONTEXT_TOKENS,
        description="Tokens of shared prefix at the start of each prompt (0: none).",
    )
    prefix_count: int = Field(default=1, ge=1, description="Number of distinct shared prefixes.")

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> SyntheticTextDataConfig:
        for name in ("prompt_tokens", "output_tokens"):
            low = getattr(self, f"{name}_min")
            high = getattr(self, f"{name}_max")
            if low is not None and high is not None and low > high:
                raise ValueError(f"{name}_min ({low}) is greater than {name}_max ({high})")
        # The shortest request the data can make must fit some model's context window.
        shortest = (
            self.prefix_tokens
            + min(self.prompt_tokens, self.prompt_tokens_max or self.prompt_tokens)
            + min(self.output_tokens, self.output_tokens_max or self.output_tokens)
        )
        if shortest > MAX_CONTEXT_TOKENS:
            raise ValueError(
                f"prefix_tokens + prompt_tokens + output_tokens = {shortest} tokens: more than any model's context"
                f" window ({MAX_CONTEXT_TOKENS})"
            )
        return self


# Column names tried, in this order, when prompt_column is not given (the spellings GuideLLM's users meet).
PROMPT_COLUMN_NAMES = ("prompt", "text", "input", "instruction", "question", "content", "query")
OUTPUT_TOKENS_COLUMN_NAMES = ("output_tokens_count", "output_tokens", "output_len")


class _RecordsDataConfig(ConfigModel):
    """What every kind of data read from records (files, datasets, conversations) shares."""

    path: str = Field(min_length=1, description="Where the data is: a file, a folder, or a Hugging Face dataset id.")
    prompt_column: str | None = Field(
        default=None,
        min_length=1,
        description="Column holding the prompt text (default: the first of " + ", ".join(PROMPT_COLUMN_NAMES) + ").",
    )
    output_tokens_count_column: str | None = Field(
        default=None,
        min_length=1,
        description="Column holding each request's output length, tokens (default: the first of "
        + ", ".join(OUTPUT_TOKENS_COLUMN_NAMES)
        + " present; none: output_tokens).",
    )
    output_tokens: int = Field(
        default=128,
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        description="Mean output length, tokens, for records that do not give one.",
    )
    output_tokens_stdev: float = Field(
        default=0, ge=0, le=MAX_CONTEXT_TOKENS, description="Standard deviation of the output length drawn."
    )
    output_tokens_min: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Shortest output drawn, tokens."
    )
    output_tokens_max: int | None = Field(
        default=None, ge=1, le=MAX_CONTEXT_TOKENS, description="Longest output drawn, tokens."
    )
    samples: int = Field(
        default=1000,
        ge=1,
        le=MAX_SAMPLES,
        description="Records taken from the data (fewer when it has fewer); requests cycle through them.",
    )
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed for shuffling and drawn output lengths.")
    shuffle: bool = Field(
        default=False,
        description="Take the samples in a seeded random order (a bounded shuffle buffer: memory stays bounded)"
        " instead of the data's own order.",
    )
    too_long: Literal["refuse", "skip"] = Field(
        default="refuse",
        description="Records whose prompt and output exceed the model's context: 'refuse' the run, or 'skip'"
        " them (counted in the results). Never truncated.",
    )

    @model_validator(mode="after")
    def _output_bounds_are_ordered(self) -> _RecordsDataConfig:
        low, high = self.output_tokens_min, self.output_tokens_max
        if low is not None and high is not None and low > high:
            raise ValueError(f"output_tokens_min ({low}) is greater than output_tokens_max ({high})")
        return self


class FileDataConfig(_RecordsDataConfig):
    """A local file of prompts: .jsonl, .json, .csv, .parquet or .txt (a prompt a line), by its extension."""

    kind: Literal["file"] = Field(default="file", description="Data source type.")


class DatasetDataConfig(_RecordsDataConfig):
    """A Hugging Face dataset: a folder from save_to_disk, a folder of data files, or a hub id (HF_HOME cache)."""

    kind: Literal["dataset"] = Field(default="dataset", description="Data source type.")
    split: str | None = Field(
        default=None, min_length=1, description="Split to read (default: train, else the only or first split)."
    )
    config: str | None = Field(default=None, min_length=1, description="The dataset's configuration (subset) name.")


class ShareGptDataConfig(_RecordsDataConfig):
    """ShareGPT conversations (JSON, JSONL): first human turn = prompt, its answer's length = output length."""

    kind: Literal["sharegpt"] = Field(default="sharegpt", description="Data source type.")
    conversations_column: str = Field(
        default="conversations", min_length=1, description="Column holding each record's list of turns."
    )


RecordsDataConfig = FileDataConfig | DatasetDataConfig | ShareGptDataConfig


def _synthetic_by_default(data: Any) -> Any:
    """A data spec without a kind is synthetic text, as before there were other kinds."""
    if isinstance(data, dict) and "kind" not in data:
        return {"kind": "synthetic_text", **data}
    return data


DataConfig = Annotated[
    SyntheticTextDataConfig | FileDataConfig | DatasetDataConfig | ShareGptDataConfig,
    Field(discriminator="kind"),
    BeforeValidator(_synthetic_by_default),
]


# --- profiles -----------------------------------------------------------------------------------------------


class TransientPhaseConfig(ConfigModel):
    """A warm-up or cool-down phase excluded from the results.

    A bare number reads as in GuideLLM: below 1 it is a fraction of the run, otherwise an absolute amount;
    either is seconds when the run has a max_duration, else requests.
    """

    requests: int | None = Field(default=None, ge=0, description="Requests in the phase.")
    seconds: float | None = Field(default=None, ge=0, le=MAX_SECONDS, description="Seconds in the phase.")
    fraction: float | None = Field(
        default=None, ge=0, lt=1, description="Share of the run's max_duration or max_requests."
    )
    amount: float | None = Field(
        default=None,
        ge=1,
        le=MAX_SECONDS,
        description="Seconds with max_duration, else requests (GuideLLM's bare number).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a number or a mapping with requests, seconds or fraction")
        if isinstance(value, int | float):
            return {"fraction": value} if value < 1 else {"amount": value}
        return value

    @model_validator(mode="after")
    def _one_way(self) -> TransientPhaseConfig:
        given = [name for name in ("requests", "seconds", "fraction", "amount") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of requests, seconds or fraction, not {' and '.join(given)}")
        return self

    def resolve(self, max_requests: int | None, max_seconds: float | None) -> tuple[int, float]:
        """(requests, seconds) of the phase against the run's constraints; GuideLLM's default preference: a
        bare number means seconds when the run has a duration."""
        if self.requests is not None:
            return self.requests, 0.0
        if self.seconds is not None:
            return 0, self.seconds
        if max_seconds is not None:
            if self.fraction is not None:
                return 0, self.fraction * max_seconds
            return 0, float(self.amount or 0)
        if max_requests is not None:
            if self.fraction is not None:
                return int(self.fraction * max_requests), 0.0
            return int(self.amount or 0), 0.0
        return 0, 0.0


class _ProfileBase(ConfigModel):
    warmup: TransientPhaseConfig | None = Field(default=None, description="Start of the run excluded from the results.")
    cooldown: TransientPhaseConfig | None = Field(default=None, description="End of the run excluded from the results.")


class SynchronousProfileConfig(_ProfileBase):
    """One request at a time."""

    kind: Literal["synchronous"] = Field(description="Profile type.")


class ConcurrentProfileConfig(_ProfileBase):
    """A fixed number of streams, each sending its next request when the previous completes."""

    kind: Literal["concurrent"] = Field(description="Profile type.")
    streams: int = Field(ge=1, description="Requests kept in flight.")


class ThroughputProfileConfig(_ProfileBase):
    """As many requests as possible, at most max_concurrency in flight."""

    kind: Literal["throughput"] = Field(description="Profile type.")
    max_concurrency: int = Field(default=512, ge=1, description="Requests kept in flight at most.")


class ConstantProfileConfig(_ProfileBase):
    """Requests at evenly spaced times."""

    kind: Literal["constant"] = Field(description="Profile type.")
    rate: float = Field(gt=0, le=MAX_RATE, description="Requests per second.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Cap on requests in flight.")


class PoissonProfileConfig(_ProfileBase):
    """Requests at exponentially distributed intervals."""

    kind: Literal["poisson"] = Field(description="Profile type.")
    rate: float = Field(gt=0, le=MAX_RATE, description="Mean requests per second.")
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed of the arrival process.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Cap on requests in flight.")


class SweepProfileConfig(_ProfileBase):
    """Synchronous, then throughput, then rates spread evenly between their request rates."""

    kind: Literal["sweep"] = Field(description="Profile type.")
    sweep_size: int = Field(
        default=10,
        ge=2,
        le=MAX_SWEEP_BENCHMARKS,
        description=f"Benchmarks in all, synchronous and throughput included (at most {MAX_SWEEP_BENCHMARKS}).",
    )
    strategy: Literal["constant", "poisson"] = Field(
        default="constant", description="Arrival process of the rate benchmarks."
    )
    max_concurrency: int = Field(default=512, ge=1, description="Cap on requests in flight in every benchmark.")
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Seed of poisson arrivals.")


ProfileConfig = Annotated[
    SynchronousProfileConfig
    | ConcurrentProfileConfig
    | ThroughputProfileConfig
    | ConstantProfileConfig
    | PoissonProfileConfig
    | SweepProfileConfig,
    Field(discriminator="kind"),
]


# --- constraints --------------------------------------------------------------------------------------------


class MaxRequestsConstraint(ConfigModel):
    """Stop issuing after count requests; the run ends when they are all done."""

    kind: Literal["max_requests"] = Field(description="Constraint type.")
    count: int = Field(ge=1, description="Requests to issue.")


class MaxDurationConstraint(ConfigModel):
    """End the run after seconds; requests still in flight count as incomplete."""

    kind: Literal["max_duration"] = Field(description="Constraint type.")
    seconds: float = Field(gt=0, le=MAX_SECONDS, description="Length of the run, seconds.")


class MinRequestsConstraint(ConfigModel):
    """End the run once count requests have completed, leaving out the half-empty tail."""

    kind: Literal["min_requests"] = Field(description="Constraint type.")
    count: int = Field(ge=1, description="Completed requests after which the run ends.")


class MaxErrorsConstraint(ConfigModel):
    """End the run once more than count requests have failed."""

    kind: Literal["max_errors"] = Field(description="Constraint type.")
    count: int = Field(ge=0, description="Errors tolerated.")


class MaxErrorRateConstraint(ConfigModel):
    """End the run once the error share of the last window requests exceeds rate."""

    kind: Literal["max_error_rate"] = Field(description="Constraint type.")
    rate: float = Field(ge=0, le=1, description="Highest tolerated share of errors, 0 to 1.")
    window: int = Field(
        default=30, ge=1, le=MAX_ERROR_WINDOW, description="Most recent finished requests the share is taken over."
    )


ConstraintConfig = Annotated[
    MaxRequestsConstraint
    | MaxDurationConstraint
    | MinRequestsConstraint
    | MaxErrorsConstraint
    | MaxErrorRateConstraint,
    Field(discriminator="kind"),
]


# --- sweeps, budgets and prices ----------------------------------------------------------------------------

# Backend fields the engine worker applies without touching the loaded engine: sweeping them costs no reload.
WORKER_FIELDS = ("batch_size", "batch_timeout", "dispatch")
MAX_SWEEP_FIELDS = 2
# The largest batch size a search may try: far beyond any engine's max_num_seqs.
MAX_SEARCH_BATCH_SIZE = 65_536
_AUTO = re.compile(r"^auto(?::(?P<low>\d+)-(?P<high>\d+))?$")


class BatchSizeSearchConfig(ConfigModel):
    """Bounds of the batch-size search (``--sweep batch_size=auto``, or ``auto:LOW-HIGH``)."""

    min: int = Field(default=1, ge=1, le=MAX_SEARCH_BATCH_SIZE, strict=True, description="Smallest batch size tried.")
    max: int = Field(default=512, ge=1, le=MAX_SEARCH_BATCH_SIZE, strict=True, description="Largest batch size tried.")

    @model_validator(mode="after")
    def _ordered(self) -> BatchSizeSearchConfig:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class SweepConfig(ConfigModel):
    """Backend settings to run the profile at, one after the other: each value (or each combination, for two
    fields: a grid) is one sweep point. batch_size, batch_timeout and dispatch change only how the worker feeds
    the engine, so the engine is loaded once for all of them; request_format and vllm_config.* change the engine,
    which is reloaded between their values (load time kept out of every timed phase and reported)."""

    batch_size: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=1, description="Micro-batch sizes (continuous dispatch: caps on requests in flight)."
    )
    batch_timeout: list[Annotated[float, Field(gt=0)]] | None = Field(
        default=None, min_length=1, description="Partial-batch timeouts, seconds."
    )
    dispatch: list[Literal["batch", "continuous"]] | None = Field(
        default=None, min_length=1, description="Dispatch modes (batch, continuous)."
    )
    request_format: list[str] | None = Field(
        default=None, min_length=1, description="Request formats; the engine is reloaded between them."
    )
    # Values of any JSON type (as vllm_config's own): a map of lists, each checked by the validator below.
    vllm_config: dict[str, Any] | None = Field(
        default=None,
        description="vLLM EngineArgs by name, each with a list of its values; the engine is reloaded between them.",
    )
    batch_size_search: BatchSizeSearchConfig | None = Field(
        default=None,
        description="Search the batch size instead of listing it (batch_size: auto, or auto:LOW-HIGH): the one with"
        " the highest output throughput within the budget, by bisection over the budget's boundary among the bounds"
        " and the powers of two between them, then a climb down while throughput rises. Assumes meeting the budget"
        " is monotone in the batch size and throughput has one peak.",
    )
    warmup_requests: int = Field(
        default=0,
        ge=0,
        le=MAX_SWEEP_WARMUP_REQUESTS,
        description="Requests run through the engine before each sweep point and left out of every result.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_batch_size(cls, data: Any) -> Any:
        """batch_size: auto (a bare word or a one-item list, as --sweep gives it) is the search, bounds and all."""
        if not isinstance(data, dict):
            return data
        key = "batch_size" if "batch_size" in data else "batchSize" if "batchSize" in data else None
        value = data.get(key) if key else None
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if not isinstance(value, str) or not value.startswith("auto"):
            return data
        match = _AUTO.match(value)
        if match is None:
            raise ValueError(f"batch_size: {value!r} is not auto or auto:LOW-HIGH (e.g. auto:8-256)")
        if "batch_size_search" in data or "batchSizeSearch" in data:
            raise ValueError("batch_size: auto and batch_size_search both given; give one")
        search = {} if match["low"] is None else {"min": int(match["low"]), "max": int(match["high"])}
        return {**{k: v for k, v in data.items() if k != key}, "batch_size_search": search}

    @model_validator(mode="after")
    def _well_formed(self) -> SweepConfig:
        if self.batch_size_search is not None and self.batch_size is not None:
            raise ValueError("batch_size and batch_size_search both given; list the sizes or search them")
        if self.batch_size_search is not None and len(self.axes()) > 1:
            raise ValueError("batch_size: auto searches the batch size alone; sweep no other field with it")
        axes = self.axes()
        if not axes:
            raise ValueError("name at least one backend field to sweep, e.g. batch_size=[8, 16, 32]")
        if len(axes) > MAX_SWEEP_FIELDS:
            names = ", ".join(name for name, _ in axes)
            raise ValueError(f"at most {MAX_SWEEP_FIELDS} fields form a grid; got {len(axes)} ({names})")
        for name, values in axes:
            if not isinstance(values, list):
                raise ValueError(f"{name}: give a list of values, not {values!r}")
            if not values:
                raise ValueError(f"{name}: give at least one value")
            for value in values:
                if not isinstance(value, str | int | float | bool):
                    raise ValueError(f"{name}: {value!r} is not a single value (number, string or boolean)")
            seen: list[Any] = []
            for value in values:
                if value in seen:
                    raise ValueError(f"{name}: {value!r} is given twice")
                seen.append(value)
        return self

    def axes(self) -> list[tuple[str, list[Any]]]:
        """(dotted backend field, values), the fields that reload the engine first, so a grid reloads as
        rarely as it can: the engine fields vary slowest."""
        axes: list[tuple[str, list[Any]]] = []
        for name, values in (self.vllm_config or {}).items():
            axes.append((f"vllm_config.{name}", values))
        for name in ("request_format", *WORKER_FIELDS):
            values = getattr(self, name)
            if values is not None:
                axes.append((name, list(values)))
        if self.batch_size_search is not None:
            axes.append(("batch_size", batch_size_candidates(self.batch_size_search.min, self.batch_size_search.max)))
        return axes

    def points(self) -> list[dict[str, Any]]:
        """Every combination of the swept values, in run order."""
        combinations: list[dict[str, Any]] = [{}]
        for name, values in self.axes():
            combinations = [{**combination, name: value} for combination in combinations for value in values]
        return combinations


def batch_size_candidates(low: int, high: int) -> list[int]:
    """The bounds and the powers of two strictly between them, ascending: what a batch-size search may try."""
    values = {low, high}
    power = 1
    while power < high:
        if power > low:
            values.add(power)
        power *= 2
    return sorted(values)


def _problems(error: ValidationError) -> str:
    """A validation error in one line: each field and what is wrong with it, without pydantic's dump."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or '(value)'}: {problem['msg']}" for problem in error.errors()
    )


def apply_overrides(backend: BackendConfig, values: dict[str, Any]) -> BackendConfig:
    """The backend with a sweep point's values in place (``vllm_config.NAME`` keys go into vllm_config)."""
    data = backend.model_dump()
    for name, value in values.items():
        if name.startswith("vllm_config."):
            data["vllm_config"] = {**data["vllm_config"], name.removeprefix("vllm_config."): value}
        else:
            data[name] = value
    return BackendConfig.model_validate(data)


def _engine_timings_kept_on(timed: list[str], backend: BackendConfig | None, sweep: SweepConfig | None) -> None:
    """A target on TTFT or TPOT cannot be judged where vllm_config turns vLLM's per-request stats off."""
    if not timed or backend is None or backend.engine != "vllm":
        return  # the simulated engine models its timestamps whatever vllm_config says
    settings = [backend.vllm_config.get("disable_log_stats")]
    if sweep is not None:
        settings += (sweep.vllm_config or {}).get("disable_log_stats", [])
    if any(setting is True for setting in settings):
        raise ValueError(
            f"{timed[0]} needs vLLM's per-request stats, which vllm_config.disable_log_stats=true turns off;"
            " leave disable_log_stats out (an SLO on TTFT or TPOT turns the stats on) or drop the target"
        )


def reloads_engine(name: str) -> bool:
    """Whether sweeping this field needs a new engine."""
    return name not in WORKER_FIELDS


SLO_DISTRIBUTIONS = {
    "request_latency": "request_latency",
    "queue_wait": "queue_wait",
    "batch_wait": "batch_wait",
    "time_to_first_token": "time_to_first_token",
    "ttft": "time_to_first_token",
    "time_per_output_token": "time_per_output_token",
    "tpot": "time_per_output_token",
}
SLO_STATISTICS = {
    "mean": "mean",
    "median": "median",
    "p50": "median",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p999": "p999",
    "max": "max",
}


# Only the engine's own per-request timestamps (vLLM's engine stats) give these.
ENGINE_TIMED_DISTRIBUTIONS = frozenset({"time_to_first_token", "time_per_output_token"})


def engine_timed_targets(slo: dict[str, float]) -> list[str]:
    """The SLO names that need the engine's per-request timestamps: targets on TTFT or TPOT."""
    return [name for name in slo if parse_slo_name(name)[0] in ENGINE_TIMED_DISTRIBUTIONS]


def parse_slo_name(name: str) -> tuple[str, str]:
    """``ttft_p95`` (or ``ttftP95``, as a resource writes it) -> ("time_to_first_token", "p95"); ValueError
    naming what is allowed."""
    base, _, statistic = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower().rpartition("_")
    if base not in SLO_DISTRIBUTIONS or statistic not in SLO_STATISTICS:
        raise ValueError(
            f"{name!r} is not DISTRIBUTION_STATISTIC with DISTRIBUTION one of {', '.join(SLO_DISTRIBUTIONS)}"
            f" and STATISTIC one of {', '.join(SLO_STATISTICS)} (e.g. request_latency_p99, ttft_p95)"
        )
    return SLO_DISTRIBUTIONS[base], SLO_STATISTICS[statistic]


class CostConfig(ConfigModel):
    """What the GPUs cost, to price each benchmark's throughput."""

    gpu_cost_per_hour: float = Field(
        gt=0, le=MAX_GPU_COST_PER_HOUR, description="Price of one GPU for one hour, in any currency."
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="GPUs the engine occupies (default: vllm_config tensor_parallel_size x pipeline_parallel_size).",
    )


# A Kubernetes label value: the name labels the metrics and the pod.
NAME_PATTERN = r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$"


# --- the whole run ------------------------------------------------------------------------------------------


class RunConfig(ConfigModel):
    """Everything one ``batchmark run`` does."""

    name: str = Field(
        default="benchmark",
        pattern=NAME_PATTERN,
        description=(
            "Name of the benchmark, used in labels and file names: a Kubernetes label value (letters, digits,"
            " '-', '_' and '.', at most 63 characters, starting and ending with a letter or digit)."
        ),
    )
    backend: BackendConfig = Field(description="The backend and the engine behind it.")
    data: DataConfig = Field(description="The requests to send.")
    profile: ProfileConfig = Field(description="When to send them.")
    constraints: list[ConstraintConfig] = Field(
        default_factory=list,
        max_length=MAX_CONSTRAINTS,
        description="When each benchmark stops; at least one must bound it.",
    )
    sample_requests: int = Field(
        default=20,
        ge=0,
        le=MAX_SAMPLE_REQUESTS,
        description="Per-request records kept in the results (memory stays bounded).",
    )
    outputs: list[str] = Field(
        default_factory=list,
        description="Files to write: .json, .yaml/.yml, .csv or .html (a self-contained report) by extension.",
    )
    sweep: SweepConfig | None = Field(
        default=None,
        description=f"Backend settings to run the whole profile at, one engine load for all that leave the engine"
        f" alone; at most {MAX_SWEEP_BENCHMARKS} benchmarks in all (points times the profile's benchmarks).",
    )
    slo: dict[str, float] = Field(
        default_factory=dict,
        description="Latency budget: DISTRIBUTION_STATISTIC -> seconds, e.g. request_latency_p99: 2.0, ttft_p95:"
        " 0.5. Distributions: request_latency, queue_wait, batch_wait, time_to_first_token (ttft),"
        " time_per_output_token (tpot); statistics: mean, median (p50), p90, p95, p99, p999, max. A request meets"
        " the budget when each of its values is at most the target (goodput counts those).",
    )
    cost: CostConfig | None = Field(default=None, description="GPU price, to report cost per million tokens.")
    repeats: int = Field(
        default=1,
        ge=1,
        le=MAX_REPEATS,
        strict=True,
        description="Times each benchmark (each sweep point) is measured on the one engine load, in rounds whose"
        " order of points is shuffled with the data seed; figures are then reported as mean, 95% confidence"
        f" interval and spread. At most {MAX_BENCHMARKS} benchmarks in all, repeats included.",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _label_value(cls, name: Any) -> Any:
        """The rule in words, before pydantic's check would print the pattern."""
        if isinstance(name, str) and not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(
                f"{name!r} is not a label value: use letters, digits, '-', '_' and '.', at most 63 characters,"
                " starting and ending with a letter or digit"
            )
        return name

    @field_validator("outputs")
    @classmethod
    def _known_extensions(cls, outputs: list[str]) -> list[str]:
        for path in outputs:
            if not path.lower().endswith(OUTPUT_EXTENSIONS):
                raise ValueError(f"{path!r}: the file name must end in one of {', '.join(OUTPUT_EXTENSIONS)}")
        return outputs

    @field_validator("slo")
    @classmethod
    def _known_targets(cls, slo: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        spelling: dict[tuple[str, str], str] = {}
        for name, target in slo.items():
            statistic = parse_slo_name(name)
            if statistic in spelling:
                raise ValueError(f"{spelling[statistic]} and {name} name the same statistic; give one target for it")
            spelling[statistic] = name
            if not target > 0:
                raise ValueError(f"{name}: the target must be a positive number of seconds, got {target}")
        _engine_timings_kept_on(engine_timed_targets(slo), info.data.get("backend"), info.data.get("sweep"))
        return slo

    @field_validator("sweep")
    @classmethod
    def _sweep_is_bounded_and_valid(cls, sweep: SweepConfig | None, info: ValidationInfo) -> SweepConfig | None:
        """Checked as the sweep's own field (after backend and profile, which it needs), so that a problem is
        reported as the sweep's."""
        backend, profile = info.data.get("backend"), info.data.get("profile")
        if sweep is None or backend is None or profile is None:
            return sweep
        points = sweep.points()
        per_point = profile.sweep_size if isinstance(profile, SweepProfileConfig) else 1
        if sweep.batch_size_search is not None and per_point > 1:
            raise ValueError(
                "batch_size: auto compares one benchmark per batch size; use a profile other than kind=sweep"
            )
        if len(points) * per_point > MAX_SWEEP_BENCHMARKS:
            sizes = " x ".join(f"{len(values)} {name}" for name, values in sweep.axes())
            in_profile = f" x {per_point} benchmarks of the sweep profile" if per_point > 1 else ""
            raise ValueError(
                f"{sizes}{in_profile} = {len(points) * per_point} benchmarks, more than the limit of"
                f" {MAX_SWEEP_BENCHMARKS}; sweep fewer values or lower profile.sweep_size"
            )
        for point in points:
            try:
                apply_overrides(backend, point)
            except ValidationError as error:
                values = ", ".join(f"{name}={value!r}" for name, value in point.items())
                raise ValueError(f"the backend is not valid with {values}: {_problems(error)}") from None
        return sweep

    @field_validator("repeats")
    @classmethod
    def _repeats_bounded(cls, repeats: int, info: ValidationInfo) -> int:
        """Checked as the field's own (after profile and sweep), so that the problem is reported as repeats'."""
        profile, sweep = info.data.get("profile"), info.data.get("sweep")
        points = len(sweep.points()) if sweep is not None else 1
        per_point = profile.sweep_size if isinstance(profile, SweepProfileConfig) else 1
        total = points * per_point * repeats
        if total > MAX_BENCHMARKS:
            raise ValueError(
                f"{points * per_point} benchmarks x {repeats} repeats = {total}, more than the limit of"
                f" {MAX_BENCHMARKS}; give fewer repeats or fewer sweep points"
            )
        return repeats

    @model_validator(mode="after")
    def _bounded(self) -> RunConfig:
        kinds = {constraint.kind for constraint in self.constraints}
        if not kinds & {"max_requests", "max_duration", "min_requests"}:
            raise ValueError("constraints: add max_requests, max_duration or min_requests so that the run ends")
        for phase_name in ("warmup", "cooldown"):
            phase: TransientPhaseConfig | None = getattr(self.profile, phase_name)
            if phase is None:
                continue
            if phase_name == "cooldown" and phase.requests is not None and "max_requests" not in kinds:
                raise ValueError("profile.cooldown.requests needs a max_requests constraint to count back from")
            if phase_name == "cooldown" and phase.seconds is not None and "max_duration" not in kinds:
                raise ValueError("profile.cooldown.seconds needs a max_duration constraint to count back from")
            if (phase.fraction is not None or phase.amount is not None) and not kinds & {
                "max_requests",
                "max_duration",
            }:
                raise ValueError(
                    f"profile.{phase_name} as a bare number needs max_requests or max_duration to measure against"
                )
        self._something_left_to_measure()
        return self

    def _something_left_to_measure(self) -> None:
        """Warm-up and cool-down that cover the whole run leave no measured request: refuse before the run."""
        max_requests = self.constraint("max_requests")
        max_duration = self.constraint("max_duration")
        count = max_requests.count if max_requests is not None else None
        seconds = max_duration.seconds if max_duration is not None else None
        phases = [phase for phase in (self.profile.warmup, self.profile.cooldown) if phase is not None]
        if not phases:
            return
        resolved = [phase.resolve(count, seconds) for phase in phases]
        excluded_requests = sum(requests for requests, _ in resolved)
        excluded_seconds = sum(phase_seconds for _, phase_seconds in resolved)
        if count is not None and excluded_requests >= count:
            raise ValueError(
                f"profile.warmup and profile.cooldown exclude {excluded_requests} requests of max_requests"
                f" count={count}: nothing would be measured"
            )
        if seconds is not None and excluded_seconds >= seconds:
            raise ValueError(
                f"profile.warmup and profile.cooldown exclude {excluded_seconds:g} s of max_duration"
                f" seconds={seconds:g}: nothing would be measured"
            )

    def constraint(self, kind: str) -> Any:
        """The constraint of that kind, or None."""
        return next((constraint for constraint in self.constraints if constraint.kind == kind), None)

    def point_backend(self, point: dict[str, Any]) -> BackendConfig:
        """A sweep point's backend as the run loads it (``{}``: the backend itself): the point's values in place,
        and vLLM's per-request stats on where an SLO targets TTFT or TPOT and vllm_config leaves them to us."""
        backend = apply_overrides(self.backend, point)
        return backend.with_engine_timings() if engine_timed_targets(self.slo) else backend


OUTPUT_EXTENSIONS = (".json", ".yaml", ".yml", ".csv", ".html")


def _tags(union: Any) -> frozenset[str]:
    members = get_args(get_args(union)[0])  # Annotated[A | B | ..., discriminator] -> (A, B, ...)
    return frozenset(get_args(member.model_fields["kind"].annotation)[0] for member in members)


# The kinds of the tagged unions: pydantic names a member by its tag in the locations of validation errors.
UNION_TAGS = _tags(ProfileConfig) | _tags(ConstraintConfig) | _tags(DataConfig)
