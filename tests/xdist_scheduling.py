"""How scripts/test spreads the suite over pytest-xdist's workers (`--dist loadfile`, tests/conftest.py).

A worker takes one group at a time: a test file, so that a file's module fixtures (its operator, its own
control plane) are set up once, except the real vLLM engine's tests, which form one group: they load both
cores, one engine at a time. The longest groups start first, so that no worker is left with a long one at the
end while the other has nothing to do.

xdist's own `--dist loadgroup` would do the grouping from `xdist_group` marks, but it works by appending the
group to each test's node ID, which pytest 9.2 no longer allows (the marks are silently ignored:
pytest-dev/pytest-xdist#1386); this scheduler groups by the node ID instead of changing it.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

VLLM_FOLDER = "tests/integration/vllm/"
VLLM_GROUP = "vllm"
# Seconds each of the longest groups took in a serial run (--durations, summed per file), only to start them
# first; groups not named here follow, in collection order.
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


def group_of(nodeid: str) -> str:
    """A test's group: its file (relative to the repository), or VLLM_GROUP for every real-engine test."""
    path = nodeid.split("::", 1)[0]
    return VLLM_GROUP if path.startswith(VLLM_FOLDER) else path


class LongestGroupsFirst(LoadFileScheduling):  # type: ignore[misc]  # xdist has no type information
    """xdist's `loadfile` with the groups of `group_of`, the longest first."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # xdist hands out the work queue's first group: move the one to start next to the front.
        position = {group: index for index, group in reversed(list(enumerate(map(group_of, self.collection))))}
        following = min(self.workqueue, key=lambda group: (-LONGEST_GROUPS.get(group, 0), position[group]))
        self.workqueue.move_to_end(following, last=False)
        super()._assign_work_unit(node)
