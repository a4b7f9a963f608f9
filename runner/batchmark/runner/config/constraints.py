"""The constraints (``--constraint``): what ends a benchmark."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from batchmark.runner.config.base import MAX_ERROR_WINDOW, MAX_SECONDS, ConfigModel


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


class OverSaturationConstraint(ConfigModel):
    """End a benchmark at a rate the engine cannot keep up with: requests in flight and their latency both rising
    over its last seconds (Kendall's trend test on the window's segments, run/saturation.py). Rate profiles
    only (constant, poisson, sweep); a sweep stops at the first rate found saturated, the knee."""

    kind: Literal["over_saturation"] = Field(description="Constraint type.")
    seconds: float = Field(
        default=30.0,
        gt=0,
        le=MAX_SECONDS,
        description="The window judged: the benchmark's last seconds; no verdict before this many have passed.",
    )
    segments: int = Field(
        default=6,
        ge=4,
        le=30,
        description="Equal parts of the window whose means are tested for a trend (the fewer, the more each holds).",
    )
    significance: float = Field(
        default=0.005,
        gt=0,
        le=0.2,
        description="One-sided p-value below which a trend counts as rising (each check on its own).",
    )
    checks: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Checks in a row (one per segment) that must find both trends rising: a stable queue near its"
        " capacity wanders up for a while, an overloaded one keeps rising.",
    )


ConstraintConfig = Annotated[
    MaxRequestsConstraint
    | MaxDurationConstraint
    | MinRequestsConstraint
    | MaxErrorsConstraint
    | MaxErrorRateConstraint
    | OverSaturationConstraint,
    Field(discriminator="kind"),
]
