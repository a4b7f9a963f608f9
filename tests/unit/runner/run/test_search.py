"""The batch-size search on model curves: the same best point as measuring every candidate, in half the points."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from batchmark.runner.config.sweep import batch_size_candidates as candidates
from batchmark.runner.run.search import Measured, search


def test_candidates_are_the_bounds_and_the_powers_of_two_between() -> None:
    assert candidates(1, 512) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert candidates(3, 100) == [3, 4, 8, 16, 32, 64, 100]
    assert candidates(8, 8) == [8]


def full_list_best(values: list[Measured]) -> int | None:
    met = [index for index, value in enumerate(values) if value.met]
    return max(met, key=lambda index: values[index].output_tokens_per_second) if met else None


def curve(throughput: Callable[[int], float], met: Callable[[int], bool], count: int = 10) -> list[Measured]:
    return [Measured(met(2**index), throughput(2**index)) for index in range(count)]


def saturating(size: int) -> float:
    return 1000 * size / (size + 48)


def peaked(size: int) -> float:
    return 1000 * size / (size + 16) - size  # rises, peaks near 48, then falls


CURVES = {
    "rising, budget at 128": (saturating, lambda size: size <= 128, True),
    "rising, budget at 1": (saturating, lambda size: size <= 1, True),
    "rising, every size meets it": (saturating, lambda size: True, True),
    "rising, no budget": (saturating, lambda size: True, False),
    "peak below the budget's boundary": (peaked, lambda size: size <= 256, True),
    "peak, no budget": (peaked, lambda size: True, False),
    "none meets the budget": (saturating, lambda size: False, True),
}


@pytest.mark.parametrize("name", list(CURVES))
def test_the_search_finds_the_full_lists_best_in_at_most_half_the_points(name: str) -> None:
    throughput, met, budget = CURVES[name]
    values = curve(throughput, met)
    outcome = search(len(values), budget, lambda index: values[index])
    assert outcome.best == full_list_best(values)
    assert len(outcome.visited) <= len(values) // 2
    assert len(set(outcome.visited)) == len(outcome.visited)  # nothing measured twice


def test_a_run_that_ends_stops_the_search_with_what_it_measured() -> None:
    values = curve(saturating, lambda size: size <= 128)
    measured: list[int] = []

    def measure(index: int) -> Measured | None:
        if len(measured) == 2:
            return None
        measured.append(index)
        return values[index]

    outcome = search(len(values), True, measure)
    assert outcome.visited == measured
    assert outcome.best == max(
        (index for index in measured if values[index].met),
        key=lambda index: values[index].output_tokens_per_second,
    )
