"""Kubernetes names given on the command line, checked before they reach a manifest or the API server."""

from __future__ import annotations

import re

from batchmark.runner.config.load import UsageError

# RFC 1123 label: a namespace, and a BatchBenchmark's name (it also names the Job and labels its pods).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# RFC 1123 subdomain: what the API server accepts as the name of most objects (dot-separated labels).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_SUBDOMAIN = 253


def dns_label(option: str, value: str, what: str) -> str:
    """``value`` when it is a DNS label; UsageError naming the option and the rule otherwise."""
    if not _DNS_LABEL.fullmatch(value):
        raise UsageError(
            f"{option}: {value!r} cannot name {what}: use lower-case letters, digits and '-', at most 63 characters, "
            "starting and ending with a letter or digit"
        )
    return value


def dns_subdomain(option: str, value: str, what: str) -> str:
    """``value`` when it is a DNS subdomain; UsageError naming the option and the rule otherwise."""
    if len(value) > MAX_SUBDOMAIN or not _DNS_SUBDOMAIN.fullmatch(value):
        raise UsageError(
            f"{option}: {value!r} cannot name {what}: use lower-case letters, digits, '-' and '.', at most "
            f"{MAX_SUBDOMAIN} characters, starting and ending with a letter or digit"
        )
    return value
