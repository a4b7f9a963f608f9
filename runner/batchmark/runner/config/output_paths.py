"""Whether an output path can be written, checked with the rest of the config before any work is done."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from batchmark.runner.config.store import S3Location, s3_store_problem


def output_problem(path: Path, inputs: Sequence[Path] = ()) -> str | None:
    """Why ``path`` cannot be written, found before any work is done; None when it can.

    The directory is tried for real, by creating and removing a file in it: a permission check alone passes
    for root everywhere, even on file systems that refuse every write (/proc).
    """
    if path.is_dir():
        return "is a directory"
    for source in inputs:
        if _same_file(path, source):
            return f"is also an input ({source}); writing it would replace it"
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as error:
        return f"cannot create files in {ancestor}: {error.strerror or error}"
    return None


def store_problem(location: Path | S3Location) -> str | None:
    """Why runs cannot be stored in the folder (made on the first run) or the S3 bucket (reached and written: a
    probe object put and deleted), found before any work; None when they can."""
    if isinstance(location, S3Location):
        return s3_store_problem(location)
    folder = location
    if folder.exists() and not folder.is_dir():
        return "is not a folder"
    ancestor = folder.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".batchmark-store.", suffix=".probe"):
            pass
    except OSError as error:
        return f"cannot create files in {ancestor}: {error.strerror or error}"
    return None


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.exists() and second.exists() and first.samefile(second)
    except OSError:
        return first.absolute() == second.absolute()
