"""The batchmark runner: vLLM micro-batching benchmarks, on a laptop or inside a Kubernetes Job."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # Read on first use, not at import: `batchmark` installs its signal handlers right after importing this
    # package, and reading the installed distributions' metadata takes a noticeable moment.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("batchmark")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
