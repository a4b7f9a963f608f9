"""How the runner starts its worker process: the multiprocessing start method, chosen by the environment."""

from __future__ import annotations

import os

MP_CONTEXT_VARIABLE = "BATCHMARK_MP_CONTEXT"


def mp_context_name() -> str:
    name = os.environ.get(MP_CONTEXT_VARIABLE, "spawn")
    if name not in ("spawn", "fork", "forkserver"):
        raise ValueError(f"{MP_CONTEXT_VARIABLE}={name!r}: use spawn, fork or forkserver (default: spawn)")
    return name
