"""What the operator's process loads: `batchmark operator` is a command of the runner's program, and the runner's
stack (SciPy, pyarrow, DuckDB, the HTML report, the store, the other commands) is memory the operator must not
carry: with it the operator started at 163 MB instead of 100 MB (benchmarks/notes/operator-under-load.md)."""

from __future__ import annotations

import json
import subprocess
import sys

# What `batchmark operator` imports before kopf runs: the command line with its parser (whose entry points
# register the operator's commands), then the modules its handler imports.
OPERATOR_IMPORTS = """
import json, sys
from batchmark.runner import cli
cli.build_parser()
import rich.console
import batchmark.operator.controller.service
import batchmark.runner.contract
import batchmark.runner.observe.console
print(json.dumps(sorted(sys.modules)))
"""

NOT_THE_OPERATORS = (
    "scipy",
    "pyarrow",
    "duckdb",
    "batchmark.runner.commands.run",
    "batchmark.runner.commands.compare",
    "batchmark.runner.commands.history",
    "batchmark.runner.commands.report",
    "batchmark.runner.commands.merge",
    "batchmark.runner.results.htmlreport",
    "batchmark.runner.store",
)


def test_the_operator_process_loads_none_of_the_runners_stack() -> None:
    # A process of its own: this test process has imported everything already.
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", OPERATOR_IMPORTS], capture_output=True, check=True).stdout
    )
    assert "batchmark.operator.controller.handlers" in loaded  # the operator's own modules did load
    below = tuple(f"{other}." for other in NOT_THE_OPERATORS)
    assert [name for name in loaded if name in NOT_THE_OPERATORS or name.startswith(below)] == []
