"""Value types for argparse shared by batchmark's commands (the runner's and, by entry point, the operator's)."""

from __future__ import annotations

import argparse


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535; anything else is a usage error that names the value."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port
