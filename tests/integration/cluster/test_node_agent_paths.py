"""How the node agent maps a container's paths and expands $(VAR) references (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.nodeagent import PathMap, expand_references


def test_mount_paths_map_to_the_pods_folders_most_specific_first(tmp_path: Path) -> None:
    paths = PathMap()
    paths.add("/etc/batchmark", tmp_path / "config")
    paths.add("/etc/batchmark/secret/", tmp_path / "secret")
    paths.add("/dev/termination-log", tmp_path / "message")

    assert paths.rewrite("/etc/batchmark/config.yaml") == str(tmp_path / "config" / "config.yaml")
    assert paths.rewrite("/etc/batchmark/secret/token") == str(tmp_path / "secret" / "token")
    assert paths.rewrite("/etc/batchmark") == str(tmp_path / "config")
    assert paths.rewrite("--termination-message-path=/dev/termination-log") == (
        f"--termination-message-path={tmp_path / 'message'}"
    )


def test_other_values_are_left_as_written(tmp_path: Path) -> None:
    paths = PathMap()
    paths.add("/etc/batchmark", tmp_path)
    for value in ("/etc/batchmarkish", "/usr/bin/python", "run", "--model=Qwen/Qwen3-0.6B", "a=b", ""):
        assert paths.rewrite(value) == value


def test_references_expand_like_kubernetes() -> None:
    environment = {"MODEL": "Qwen/Qwen3-0.6B", "BATCH": "8"}
    assert expand_references("--model=$(MODEL) --batch $(BATCH)", environment) == "--model=Qwen/Qwen3-0.6B --batch 8"
    assert expand_references("$(UNKNOWN) stays", environment) == "$(UNKNOWN) stays"
    assert expand_references("$$(MODEL) is escaped", environment) == "$(MODEL) is escaped"
    assert expand_references("price: $5", environment) == "price: $5"
