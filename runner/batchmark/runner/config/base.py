"""What every config model shares: unknown keys refused, snake_case or camelCase, and the bounds beyond
which a value can never work."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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


# Engine replicas in one run: each is a process with its own engine, devices and memory; a node holds at most a
# few dozen GPUs, and more replicas than that on CPU slices would measure the machine's scheduler.
MAX_REPLICAS = 64
