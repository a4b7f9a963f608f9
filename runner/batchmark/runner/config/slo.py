"""Latency budgets (``--slo``): their names, and which need the engine's own per-request timestamps."""

from __future__ import annotations

import re

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
