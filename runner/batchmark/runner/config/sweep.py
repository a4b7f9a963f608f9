"""The sweep (``--sweep``): backend settings run one after the other, and the batch-size search."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from batchmark.runner.config.backend import BackendConfig
from batchmark.runner.config.base import MAX_REPLICAS, MAX_SWEEP_WARMUP_REQUESTS, ConfigModel

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
    replicas: list[Annotated[int, Field(ge=1, le=MAX_REPLICAS, strict=True)]] | None = Field(
        default=None,
        min_length=1,
        description="Engine replica counts (backend.replicas), each a new set of engines; with 1 among them, every"
        " benchmark of more replicas reports its scaling efficiency against the one replica's.",
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
        for name in ("replicas", "request_format", *WORKER_FIELDS):
            values = getattr(self, name)
            if values is not None:
                axes.append((name, list(values)))
        if self.batch_size_search is not None:
            axes.append(("batch_size", batch_size_candidates(self.batch_size_search.min, self.batch_size_search.max)))
        return axes

    def reloading_fields(self) -> list[str]:
        """The swept fields whose values need a new engine each."""
        return [name for name, _ in self.axes() if reloads_engine(name)]

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


def apply_overrides(backend: BackendConfig, values: dict[str, Any]) -> BackendConfig:
    """The backend with a sweep point's values in place (``vllm_config.NAME`` keys go into vllm_config)."""
    data = backend.model_dump()
    for name, value in values.items():
        if name.startswith("vllm_config."):
            data["vllm_config"] = {**data["vllm_config"], name.removeprefix("vllm_config."): value}
        else:
            data[name] = value
    return BackendConfig.model_validate(data)


def reloads_engine(name: str) -> bool:
    """Whether sweeping this field needs a new engine."""
    return name not in WORKER_FIELDS
