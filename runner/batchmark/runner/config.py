"""The runner's configuration: one set of models for the CLI, config files, the CRD schema and the docs.

Field names are snake_case (GuideLLM's spellings); every model also accepts the camelCase form that
Kubernetes resources use. Unknown keys are errors.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

log = logging.getLogger(__name__)


class ConfigModel(BaseModel):
    """Base of every config model: strict about unknown keys, bilingual about case."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
    )


# --- engine and backend -------------------------------------------------------------------------------------


class SimulationConfig(ConfigModel):
    """Cost model of the simulated engine; the defaults model a ~0.6B model on one H100-class GPU."""

    time_scale: float = Field(
        default=1.0,
        ge=0,
        description="Multiplier on simulated step times when sleeping; 0 computes timings without sleeping.",
    )
    step_fixed_seconds: float = Field(
        default=0.004,
        ge=0,
        description="Fixed cost of one engine step (scheduling, kernel launches, sampling), seconds.",
    )
    batched_token_seconds: float = Field(
        default=3.0e-6,
        ge=0,
        description="Cost per token processed in a step (prefill chunk or decode token), seconds.",
    )
    context_token_seconds: float = Field(
        default=3.7e-8,
        ge=0,
        description="Cost per token of KV cache read by attention in a step, seconds.",
    )
    gpu_name: str = Field(
        default="simulated H100-class GPU",
        description="Name reported for the simulated device.",
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
        description="vLLM EngineArgs by their Python names (e.g. gpu_memory_utilization, max_model_len).",
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


BackendConfig = VllmPythonBatchBackendConfig


# --- data ---------------------------------------------------------------------------------------------------


class SyntheticTextDataConfig(ConfigModel):
    """Synthetic prompts of exact token lengths with pinned output lengths."""

    kind: Literal["synthetic_text"] = Field(default="synthetic_text", description="Data source type.")
    prompt_tokens: int = Field(ge=1, description="Mean prompt length, tokens.")
    prompt_tokens_stdev: float = Field(default=0, ge=0, description="Standard deviation of prompt length.")
    prompt_tokens_min: int | None = Field(default=None, ge=1, description="Shortest prompt, tokens.")
    prompt_tokens_max: int | None = Field(default=None, ge=1, description="Longest prompt, tokens.")
    output_tokens: int = Field(ge=1, description="Mean output length, tokens (pinned with ignore_eos).")
    output_tokens_stdev: float = Field(default=0, ge=0, description="Standard deviation of output length.")
    output_tokens_min: int | None = Field(default=None, ge=1, description="Shortest output, tokens.")
    output_tokens_max: int | None = Field(default=None, ge=1, description="Longest output, tokens.")
    samples: int = Field(default=1000, ge=1, description="Distinct length pairs drawn; requests cycle through them.")
    seed: int = Field(default=42, description="Seed for lengths and prompt content.")
    prefix_tokens: int = Field(
        default=0, ge=0, description="Tokens of shared prefix at the start of each prompt (0: none)."
    )
    prefix_count: int = Field(default=1, ge=1, description="Number of distinct shared prefixes.")

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> SyntheticTextDataConfig:
        for name in ("prompt_tokens", "output_tokens"):
            low = getattr(self, f"{name}_min")
            high = getattr(self, f"{name}_max")
            if low is not None and high is not None and low > high:
                raise ValueError(f"{name}_min ({low}) is greater than {name}_max ({high})")
        return self


DataConfig = SyntheticTextDataConfig


# --- profiles -----------------------------------------------------------------------------------------------


class TransientPhaseConfig(ConfigModel):
    """A warm-up or cool-down phase excluded from the results.

    A bare number reads as in GuideLLM: below 1 it is a fraction of the run, otherwise an absolute amount;
    either is seconds when the run has a max_duration, else requests.
    """

    requests: int | None = Field(default=None, ge=0, description="Requests in the phase.")
    seconds: float | None = Field(default=None, ge=0, description="Seconds in the phase.")
    fraction: float | None = Field(
        default=None, ge=0, lt=1, description="Share of the run's max_duration or max_requests."
    )
    amount: float | None = Field(
        default=None, ge=1, description="Seconds with max_duration, else requests (GuideLLM's bare number)."
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
    rate: float = Field(gt=0, description="Requests per second.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Cap on requests in flight.")


class PoissonProfileConfig(_ProfileBase):
    """Requests at exponentially distributed intervals."""

    kind: Literal["poisson"] = Field(description="Profile type.")
    rate: float = Field(gt=0, description="Mean requests per second.")
    seed: int = Field(default=42, description="Seed of the arrival process.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Cap on requests in flight.")


class SweepProfileConfig(_ProfileBase):
    """Synchronous, then throughput, then rates spread evenly between their request rates."""

    kind: Literal["sweep"] = Field(description="Profile type.")
    sweep_size: int = Field(default=10, ge=2, description="Benchmarks in all, synchronous and throughput included.")
    strategy: Literal["constant", "poisson"] = Field(
        default="constant", description="Arrival process of the rate benchmarks."
    )
    max_concurrency: int = Field(default=512, ge=1, description="Cap on requests in flight in every benchmark.")
    seed: int = Field(default=42, description="Seed of poisson arrivals.")


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
    seconds: float = Field(gt=0, description="Length of the run, seconds.")


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
    window: int = Field(default=30, ge=1, description="Most recent finished requests the share is taken over.")


ConstraintConfig = Annotated[
    MaxRequestsConstraint
    | MaxDurationConstraint
    | MinRequestsConstraint
    | MaxErrorsConstraint
    | MaxErrorRateConstraint,
    Field(discriminator="kind"),
]


# --- the whole run ------------------------------------------------------------------------------------------


class RunConfig(ConfigModel):
    """Everything one ``batchmark run`` does."""

    name: str = Field(
        default="benchmark",
        pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$",
        description=(
            "Name of the benchmark, used in labels and file names: a Kubernetes label value (letters, digits,"
            " '-', '_' and '.', at most 63 characters, starting and ending with a letter or digit)."
        ),
    )
    backend: BackendConfig = Field(description="The backend and the engine behind it.")
    data: DataConfig = Field(description="The requests to send.")
    profile: ProfileConfig = Field(description="When to send them.")
    constraints: list[ConstraintConfig] = Field(
        default_factory=list, description="When each benchmark stops; at least one must bound it."
    )
    sample_requests: int = Field(
        default=20, ge=0, description="Per-request records kept in the results (memory stays bounded)."
    )
    outputs: list[str] = Field(
        default_factory=list,
        description="Files to write: .json, .yaml/.yml, .csv or .html (a self-contained report) by extension.",
    )

    @field_validator("outputs")
    @classmethod
    def _known_extensions(cls, outputs: list[str]) -> list[str]:
        for path in outputs:
            if not path.lower().endswith(OUTPUT_EXTENSIONS):
                raise ValueError(f"{path!r}: the file name must end in one of {', '.join(OUTPUT_EXTENSIONS)}")
        return outputs

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
        return self

    def constraint(self, kind: str) -> Any:
        """The constraint of that kind, or None."""
        return next((constraint for constraint in self.constraints if constraint.kind == kind), None)


OUTPUT_EXTENSIONS = (".json", ".yaml", ".yml", ".csv", ".html")


def _tags(union: Any) -> frozenset[str]:
    members = get_args(get_args(union)[0])  # Annotated[A | B | ..., discriminator] -> (A, B, ...)
    return frozenset(get_args(member.model_fields["kind"].annotation)[0] for member in members)


# The kinds of the tagged unions: pydantic names a member by its tag in the locations of validation errors.
UNION_TAGS = _tags(ProfileConfig) | _tags(ConstraintConfig)
