"""The profile section (``--profile``): how requests are issued, and the warm-up and cool-down around the
measured window."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from batchmark.runner.config.base import MAX_RATE, MAX_SECONDS, MAX_SEED, MAX_SWEEP_BENCHMARKS, ConfigModel


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
