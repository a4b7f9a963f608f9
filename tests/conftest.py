"""Fixtures shared by every test folder (the local Kubernetes control plane, tests/cluster/), and how scripts/test
spreads the suite over pytest-xdist's workers.

scripts/test runs `pytest -n auto --dist loadgroup --no-loadscope-reorder`. Here, "auto" means two workers
(BATCHMARK_TEST_WORKERS changes it), or none when the run names one test file. A worker takes one group at a
time: a test file (its module fixtures, such as a file's operator, are then set up once), except the real
vLLM engine's tests, which form one group (they load both cores, one engine at a time). The longest groups
start first so that no worker is left with a long one at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.cluster.fixtures"]

DEFAULT_WORKERS = 2
VLLM_FOLDER = Path(__file__).resolve().parent / "integration" / "vllm"
VLLM_GROUP = "vllm"
# Seconds each of the longest groups took in a serial run (the --durations of scripts/test, summed per file),
# only to start them first; groups not named here start after these, in collection order.
LONGEST_GROUPS = {
    VLLM_GROUP: 800,
    "tests/integration/operator/test_kueue_queueing.py": 500,
    "tests/integration/operator/test_operator_e2e.py": 320,
    "tests/integration/cluster/test_containers_runtime.py": 260,
    "tests/integration/cluster/test_chart_install.py": 230,
    "tests/integration/cluster/test_demo.py": 170,
    "tests/integration/cluster/test_kueue.py": 110,
    "tests/integration/operator/test_benchmark_pod_identity.py": 90,
    "tests/integration/runner/test_faults.py": 85,
}


def _names_one_file(config: pytest.Config) -> bool:
    files = {argument.split("::", 1)[0] for argument in config.args}
    return len(files) == 1 and Path(config.invocation_params.dir, next(iter(files))).is_file()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: no workers for one file (they would only start and wait), else two or BATCHMARK_TEST_WORKERS.

    Two, because the 2-core machines this runs on are busy with one worker's engine or builds, and mostly wait
    on the control plane's pods with the other's."""
    if _names_one_file(config):
        return 0
    configured = os.environ.get("BATCHMARK_TEST_WORKERS")
    if configured is None:
        return DEFAULT_WORKERS
    if not configured.isdecimal():
        raise pytest.UsageError(f"BATCHMARK_TEST_WORKERS: a number of workers (0 for none), not {configured!r}")
    return int(configured)


def group_of(item: pytest.Item) -> str:
    """The xdist group of a test: its file, relative to the root, or VLLM_GROUP for every real-engine test."""
    path = Path(item.path)
    if path.is_relative_to(VLLM_FOLDER):
        return VLLM_GROUP
    return path.relative_to(item.config.rootpath).as_posix()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    # A stable sort: the same order on every worker, as xdist requires.
    items.sort(key=lambda item: -LONGEST_GROUPS.get(group_of(item), 0))
