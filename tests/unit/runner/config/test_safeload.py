"""YAML and JSON read with bounds: what a config legitimately uses still loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchmark.runner.config.safeload import (
    MAX_CONFIG_BYTES,
    DocumentError,
    UnusableFile,
    load_json,
    load_yaml,
    read_document,
)


def test_anchors_aliases_and_merge_keys_still_load() -> None:
    text = "base: &base {model: m, batch_size: 8}\nbackend:\n  <<: *base\n  batch_size: 16\nagain: *base\n"
    assert load_yaml(text, 1000) == {
        "base": {"model": "m", "batch_size": 8},
        "backend": {"model": "m", "batch_size": 16},
        "again": {"model": "m", "batch_size": 8},
    }


def test_the_bound_counts_every_expansion_of_an_alias() -> None:
    text = "a: &a [x, y, z]\nb: [*a, *a, *a, *a]\n"
    assert load_yaml(text, 100) is not None
    with pytest.raises(DocumentError, match="aliases are expanded"):
        load_yaml(text, 20)


def test_a_key_twice_is_refused_in_yaml_and_json() -> None:
    with pytest.raises(DocumentError, match="'b' twice in one mapping \\(line 3\\)"):
        load_yaml("a:\n  b: 1\n  b: 2\n", 1000)
    with pytest.raises(DocumentError, match="'b' twice"):
        load_json('{"a": {"b": 1, "b": 2}}')


def test_a_file_is_read_as_json_by_its_name_else_as_yaml(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"model": "m"}')
    (tmp_path / "a.yaml").write_text("model: m  # a comment JSON would refuse\n")
    assert read_document(tmp_path / "a.json", "--config", "a run config") == {"model": "m"}
    assert read_document(tmp_path / "a.yaml", "--config", "a run config") == {"model": "m"}
    (tmp_path / "b.json").write_text("model: m\n")
    with pytest.raises(UnusableFile, match=f"^--config: {tmp_path / 'b.json'}: not a run config: not JSON: "):
        read_document(tmp_path / "b.json", "--config", "a run config")


def test_a_file_of_exactly_the_bound_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES - 1) + b"\n")
    assert read_document(path, "--config", "a run config") is None
    path.write_bytes(b"#" * MAX_CONFIG_BYTES + b"\n")
    with pytest.raises(UnusableFile, match="larger than 1 MiB, too large for a run config"):
        read_document(path, "--config", "a run config")
