"""Where runs are kept beyond the run (``--store``): a folder, given as a path or a ``file://`` URL. On a cluster
it is a folder on a mounted volume (a PersistentVolumeClaim)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

# Longer than any real path; a longer "path" is a mistake.
MAX_STORE_LENGTH = 4096


def store_folder(location: str) -> Path:
    """The folder ``location`` names; ValueError saying why when it names none."""
    if not location.strip():
        raise ValueError(f"{location!r} names no folder: give one, e.g. --store ./results")
    if len(location) > MAX_STORE_LENGTH:
        raise ValueError(f"is longer than {MAX_STORE_LENGTH} characters")
    if "\x00" in location:
        raise ValueError(f"{location!r} contains a NUL character")
    scheme = urllib.parse.urlsplit(location).scheme
    # One letter is a Windows drive, not a scheme; a path with a colon later on is a path.
    if len(scheme) > 1 and "://" in location:
        if scheme != "file":
            raise ValueError(
                f"{location!r}: {scheme}:// stores are not supported: give a folder (a path or a file:// URL)"
            )
        parts = urllib.parse.urlsplit(location)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{location!r} names the host {parts.netloc!r}: only local folders (file:///path)")
        return Path(urllib.parse.unquote(parts.path))
    return Path(location)
