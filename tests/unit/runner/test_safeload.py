"""YAML and JSON read with bounds: what a config legitimately uses still loads."""

from __future__ import annotations

import pytest

from batchmark.runner.safeload import DocumentError, load_json, load_yaml


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
