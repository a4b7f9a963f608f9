"""Value types for argparse shared by batchmark's commands (the runner's and, by entry point, the operator's)."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Final


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535; anything else is a usage error that names the value."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


HISTORY_FORMATS: Final = ("table", "json", "csv")  # `batchmark history --format`
DEFAULT_LINGER_SECONDS: Final = 15.0  # Prometheus' default scrape interval: the last values get scraped once
MAX_LINGER_SECONDS: Final = 3600.0  # an hour: far beyond any scrape interval


def linger_seconds(text: str) -> float:
    """How long the metrics outlive the run: 0 to MAX_LINGER_SECONDS."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= MAX_LINGER_SECONDS:  # also rejects NaN and infinity
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_LINGER_SECONDS:g} seconds, got {text}")
    return seconds


def http_url(text: str) -> str:
    """An http(s) URL with a host: an empty or misspelt value must not silently turn pushing off."""
    try:
        parsed = urllib.parse.urlsplit(text)
        parsed.port  # noqa: B018 - reading it validates it
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host, got {text!r}")
    return text
