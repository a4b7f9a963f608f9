"""Fixtures shared by every test folder (the local Kubernetes control plane of devtools/cluster/, from
tests/cluster_fixtures.py), and how many pytest-xdist workers scripts/test's `-n auto --dist loadfile` starts
and how it spreads the tests over them (tests/xdist_scheduling.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runner.harness import Program

pytest_plugins = ["tests.cluster_fixtures"]

DEFAULT_WORKERS = 2


def _names_one_file(config: pytest.Config) -> bool:
    files = {argument.split("::", 1)[0] for argument in config.args}
    return len(files) == 1 and Path(config.invocation_params.dir, next(iter(files))).is_file()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: no workers for one file (they would only start and wait), else two or BATCHMARK_TEST_WORKERS.

    Two, because on the 2-core machines this runs on one worker's engine or builds keep the cores busy while
    the other mostly waits on its control plane's pods."""
    if _names_one_file(config):
        return 0
    configured = os.environ.get("BATCHMARK_TEST_WORKERS")
    if configured is None:
        return DEFAULT_WORKERS
    if not configured.isdecimal():
        raise pytest.UsageError(f"BATCHMARK_TEST_WORKERS: a number of workers (0 for none), not {configured!r}")
    return int(configured)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`: whole files to a worker, all the real vLLM engine's tests as one, the longest first."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.xdist_scheduling import LongestGroupsFirst

    return LongestGroupsFirst(config, log)


@pytest.fixture(autouse=True)
def _no_program_outlives_its_test() -> Iterator[None]:
    """A test that failed half-way through a run leaves nothing running for the tests after it."""
    yield
    Program.end_leftovers()
