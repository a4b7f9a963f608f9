"""``--sweep batch_size=auto``: the batch size with the highest output throughput within the budget, found by
measuring a few of the candidates instead of all of them.

The candidates are the bounds and the powers of two between them. The search assumes what a batch-size sweep
on one engine shows: (1) meeting the latency budget is monotone in the batch size (once a size misses it,
every larger one misses it too: bigger batches make each decode step longer), and (2) output throughput is
unimodal over the candidates (it rises with the batch size, then levels off or falls). It then works in two
steps:

1. Bisection over the budget's boundary: the largest candidate that meets the budget, in about
   log2(candidates) measurements (without a budget, the largest candidate).
2. A climb down from that boundary: the next smaller candidate is measured while it is faster than the best so
   far; the first that is not ends the search (by (2), no smaller one can be faster).

With repeats the search decides on each point's first repeat; the runner then measures the points it visited
again in interleaved rounds and chooses the best over every repeat (``BenchmarkRunner._search``).

Where the assumptions fail (a budget met again at a larger size, a second throughput peak), the search can miss
the best point a full list would find; the points it measured are in the report (``sweep.search``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

METHOD = "bisection over the latency budget's boundary, then a climb down while throughput rises"


@dataclass
class Measured:
    """What one candidate measured: whether it met the budget (in every repeat) and its output tokens/s."""

    met: bool
    output_tokens_per_second: float


@dataclass
class SearchOutcome:
    visited: list[int] = field(default_factory=list)  # candidate indices in the order they were measured
    best: int | None = None  # candidate index, None when none met the budget


def search(count: int, budget: bool, measure: Callable[[int], Measured | None]) -> SearchOutcome:
    """Search ``count`` candidates; ``measure(index)`` runs one (None: the run ended, the search stops). Without
    a budget every candidate meets it: the search starts at the largest."""
    outcome = SearchOutcome()
    seen: dict[int, Measured] = {}

    def at(index: int) -> Measured | None:
        if index not in seen:
            result = measure(index)
            if result is None:
                return None
            seen[index] = result
            outcome.visited.append(index)
        return seen[index]

    # 1. The largest candidate that meets the budget: every index up to ``feasible`` met it, none from ``missed``.
    feasible, missed = (-1, count) if budget else (count - 1, count)
    while missed - feasible > 1:
        middle = (feasible + missed) // 2
        result = at(middle)
        if result is None:
            return _best(outcome, seen)
        if result.met:
            feasible = middle
        else:
            missed = middle
    if feasible < 0 or at(feasible) is None:
        return _best(outcome, seen)
    # 2. Climb down from the boundary while the next smaller candidate is faster.
    index = feasible
    while index > 0:
        current = seen[index]
        lower = at(index - 1)
        if lower is None or not lower.met or lower.output_tokens_per_second <= current.output_tokens_per_second:
            break
        index -= 1
    return _best(outcome, seen)


def _best(outcome: SearchOutcome, seen: dict[int, Measured]) -> SearchOutcome:
    met = [index for index, result in seen.items() if result.met]
    outcome.best = max(met, key=lambda index: seen[index].output_tokens_per_second) if met else None
    return outcome
