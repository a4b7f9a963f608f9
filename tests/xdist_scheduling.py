"""How scripts/test spreads the suite over pytest-xdist's workers (`--dist loadfile`, tests/conftest.py).

A worker takes one group at a time: a test file, so that a file's module fixtures (its operator, its own
control plane) are set up once, with two exceptions:
- the real vLLM engine's tests form one group: they load both cores, one engine at a time (the demo's test runs
  an engine too, and goes with them);
- the tests on the session's control plane (`kube_cluster`) form one group: each worker that ran one would
  start a control plane of its own, and each holds the runner image on each of its three nodes' containerd and
  the operator's on its untainted one (about 4 GB of disk), beside those that test_chart_install and test_demo
  start; with a control plane per worker, when every node held both images, a run with other work on the
  machine filled its disk ("no space left on device" while importing images).
The longest groups start first, so that no worker is left with a long one at the end while the other has
nothing to do.

xdist's own `--dist loadgroup` would do the grouping from `xdist_group` marks, but it works by appending the
group to each test's node ID, which pytest 9.2 no longer allows (the marks are silently ignored:
pytest-dev/pytest-xdist#1386); this scheduler groups by the node ID instead of changing it.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

VLLM_FOLDER = "tests/integration/vllm/"
VLLM_GROUP = "vllm"
# Elsewhere, but running a vLLM engine: the demo's real benchmark on its CPU node.
VLLM_ELSEWHERE = ("tests/integration/cluster/test_demo.py",)
SESSION_CLUSTER_FOLDERS = ("tests/integration/operator/", "tests/integration/cluster/")
SESSION_CLUSTER_GROUP = "session control plane"
# In those folders, but on control planes of their own only: they may run beside the group.
OWN_CLUSTERS_ONLY = (
    "tests/integration/cluster/test_chart_install.py",
    "tests/integration/cluster/test_demo.py",
    "tests/integration/operator/test_without_kueue.py",
)
# Seconds each of the longest groups took (--junitxml, summed per group; two workers, f062705), only to start
# them first; groups not named here follow, in collection order.
LONGEST_GROUPS = {
    VLLM_GROUP: 1651,
    SESSION_CLUSTER_GROUP: 1488,
    "tests/integration/cluster/test_chart_install.py": 106,
    "tests/integration/runner/test_faults.py": 69,
    "tests/integration/runner/test_s3_store.py": 42,
    "tests/integration/operator/test_without_kueue.py": 42,
}


def group_of(nodeid: str) -> str:
    """A test's group: VLLM_GROUP, SESSION_CLUSTER_GROUP, or its file (relative to the repository)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(VLLM_FOLDER) or path in VLLM_ELSEWHERE:
        return VLLM_GROUP
    if path.startswith(SESSION_CLUSTER_FOLDERS) and path not in OWN_CLUSTERS_ONLY:
        return SESSION_CLUSTER_GROUP
    return path


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
