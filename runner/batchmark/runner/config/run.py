"""The whole run: every section together, and the checks that span sections."""

from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.config.base import (
    MAX_BENCHMARKS,
    MAX_CONSTRAINTS,
    MAX_REPEATS,
    MAX_SAMPLE_REQUESTS,
    MAX_SWEEP_BENCHMARKS,
    ConfigModel,
)
from batchmark.runner.config.constraints import ConstraintConfig
from batchmark.runner.config.cost import CostConfig
from batchmark.runner.config.data import DataConfig
from batchmark.runner.config.profiles import ProfileConfig, SweepProfileConfig, TransientPhaseConfig
from batchmark.runner.config.slo import engine_timed_targets, parse_slo_name
from batchmark.runner.config.store import store_location
from batchmark.runner.config.sweep import SweepConfig, apply_overrides


def _problems(error: ValidationError) -> str:
    """A validation error in one line: each field and what is wrong with it, without pydantic's dump."""
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or '(value)'}: {problem['msg']}" for problem in error.errors()
    )


def _engine_timings_kept_on(timed: list[str], backend: BackendConfig | None, sweep: SweepConfig | None) -> None:
    """A target on TTFT or TPOT cannot be judged where vllm_config turns vLLM's per-request stats off (the
    simulated engine honours that setting as vLLM does)."""
    if not timed or backend is None:
        return
    settings = [backend.vllm_config.get("disable_log_stats")]
    if sweep is not None:
        settings += (sweep.vllm_config or {}).get("disable_log_stats", [])
    if any(setting is True for setting in settings):
        raise ValueError(
            f"{timed[0]} needs vLLM's per-request stats, which vllm_config.disable_log_stats=true turns off;"
            " leave disable_log_stats out (an SLO on TTFT or TPOT turns the stats on) or drop the target"
        )


# A Kubernetes label value: the name labels the metrics and the pod.
NAME_PATTERN = r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$"


# The profiles that send requests at a rate, whatever the engine's pace (the others wait for requests to finish).
RATE_PROFILES = ("constant", "poisson", "sweep")


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
        description="Files to write: .json, .yaml/.yml, .csv or .html (a self-contained report) by extension;"
        " .br.yaml or .br.json: the llm-d Benchmark Report v0.2, one document per benchmark.",
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

    store: str | None = Field(
        default=None,
        description="A results store to keep the run in beyond the run: a folder (a path or a file:// URL; on a"
        " cluster, a mounted volume) or an S3-compatible bucket (s3://BUCKET[/PREFIX], the endpoint and credentials"
        " from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Each run goes in whole (results, HTML"
        " report, config, fingerprint) under runs/MODEL/HARDWARE/DATE/, with an index entry that `batchmark history`"
        " reads (null: none).",
    )

    baseline: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Judge the run against this stored run of the same workload: its id in the store, or 'last', the"
        " latest complete one that started before it. The verdict (regressed: output tokens/s fell significantly,"
        " by Welch's t-test on the repeats, and by more than 5%) is in the results and, in a pod, the status's"
        " Regressed condition; without repeats, or without such a run, it is Unknown. Needs store.",
    )

    @field_validator("store")
    @classmethod
    def _store_is_a_store(cls, store: str | None) -> str | None:
        if store is not None:
            store_location(store)
        return store

    @field_validator("baseline")
    @classmethod
    def _baseline_in_a_store(cls, baseline: str | None, info: ValidationInfo) -> str | None:
        if baseline is not None and info.data.get("store") is None:
            raise ValueError("the baseline is a run in a results store: give --store (store) too")
        return baseline

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
        if "over_saturation" in kinds and self.profile.kind not in RATE_PROFILES:
            raise ValueError(
                f"constraints: over_saturation judges a rate the engine is sent ({', '.join(RATE_PROFILES)} profiles);"
                f" a {self.profile.kind} profile sends a request only when one finishes, which never over-saturates"
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


OUTPUT_EXTENSIONS = (".json", ".yaml", ".yml", ".csv", ".html", ".br.yaml", ".br.json")


def _tags(union: Any) -> frozenset[str]:
    members = get_args(get_args(union)[0])  # Annotated[A | B | ..., discriminator] -> (A, B, ...)
    return frozenset(get_args(member.model_fields["kind"].annotation)[0] for member in members)


# The kinds of the tagged unions: pydantic names a member by its tag in the locations of validation errors.
UNION_TAGS = _tags(ProfileConfig) | _tags(ConstraintConfig) | _tags(DataConfig)
