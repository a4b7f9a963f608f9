"""The batchmark runner: vLLM micro-batching benchmarks, on a laptop or inside a Kubernetes Job."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("batchmark")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
