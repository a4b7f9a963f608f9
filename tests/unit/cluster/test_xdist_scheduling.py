"""scripts/test's spread of the suite over pytest-xdist's workers (tests/xdist_scheduling.py), driven through
the xdist scheduler it subclasses: a newer xdist that changes those internals fails here, not in CI's run."""

from __future__ import annotations

from collections import OrderedDict

from tests.xdist_scheduling import SESSION_CLUSTER_GROUP, VLLM_GROUP, LongestGroupsFirst, group_of

COLLECTION = [
    "tests/unit/runner/test_config.py::test_a",
    "tests/integration/runner/test_cli.py::test_b",
    "tests/integration/vllm/test_vllm_engine.py::test_c",
    "tests/integration/operator/test_operator_e2e.py::test_d",
    "tests/integration/cluster/test_demo.py::test_e",
    "tests/integration/runner/test_faults.py::test_f",
    "tests/integration/cluster/test_kueue.py::test_g",
    "tests/integration/vllm/test_exit_paths.py::test_h",
    "tests/integration/cluster/test_chart_install.py::test_i",
]


def test_the_groups() -> None:
    assert [group_of(nodeid) for nodeid in COLLECTION] == [
        "tests/unit/runner/test_config.py",
        "tests/integration/runner/test_cli.py",
        VLLM_GROUP,
        SESSION_CLUSTER_GROUP,
        VLLM_GROUP,  # a control plane of its own, and a vLLM engine on it: one engine at a time
        "tests/integration/runner/test_faults.py",
        SESSION_CLUSTER_GROUP,
        VLLM_GROUP,
        "tests/integration/cluster/test_chart_install.py",
    ]


class Worker:
    """What the scheduler sends a worker: the indexes (in the worker's collection) of the tests to run."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def test_whole_groups_go_out_the_longest_first_then_in_collection_order() -> None:
    scheduler = LongestGroupsFirst.__new__(LongestGroupsFirst)  # past __init__'s parsing of the command line
    worker = Worker()
    scheduler.collection = COLLECTION
    scheduler.assigned_work = {}
    scheduler.registered_collections = {worker: COLLECTION}
    scheduler.workqueue = OrderedDict()
    for nodeid in COLLECTION:
        scheduler.workqueue.setdefault(scheduler._split_scope(nodeid), OrderedDict())[nodeid] = False
    while scheduler.workqueue:
        scheduler._assign_work_unit(worker)
    groups = [[group_of(COLLECTION[index]) for index in indexes] for indexes in worker.sent]
    assert [group[0] for group in groups] == [
        VLLM_GROUP,
        SESSION_CLUSTER_GROUP,
        "tests/integration/cluster/test_chart_install.py",
        "tests/integration/runner/test_faults.py",
        "tests/unit/runner/test_config.py",
        "tests/integration/runner/test_cli.py",
    ]
    assert all(len(set(group)) == 1 for group in groups)  # each send is one whole group
    assert sorted(index for indexes in worker.sent for index in indexes) == list(range(len(COLLECTION)))
