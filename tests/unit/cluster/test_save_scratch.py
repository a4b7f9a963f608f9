"""`podman save`'s scratch folders (devtools/cluster/kubelets.py): a save killed midway leaves a copy of a layer
(6.6 GB for the CPU runner's vLLM), which the next save removes; a live save's folder is left alone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devtools.cluster import kubelets, processes


def test_the_scratch_of_a_dead_save_is_removed_and_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubelets, "SAVE_SCRATCH", tmp_path)
    ended = subprocess.Popen(["true"])
    ended.wait()
    record = processes.record_for(os.getpid(), "test")
    assert record is not None
    dead = tmp_path / f"{kubelets.SAVE_SCRATCH_PREFIX}{ended.pid}-{record.start_ticks}-abc"
    # A process that took a dead save's PID is another process: its start time differs.
    reused = tmp_path / f"{kubelets.SAVE_SCRATCH_PREFIX}{os.getpid()}-{record.start_ticks + 1}-abc"
    live = tmp_path / f"{kubelets.SAVE_SCRATCH_PREFIX}{os.getpid()}-{record.start_ticks}-abc"
    assert live.name.startswith(kubelets._scratch_prefix())
    other = tmp_path / "someone-elses"
    for folder in (dead, reused, live, other):
        folder.mkdir()
        (folder / "layer").write_bytes(b"x" * 10)
    kubelets._remove_dead_scratch()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted((live.name, other.name))
