"""`batchmark operator --defaults FILE`: camelCase YAML, every key optional, unknown keys refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchmark.operator.service import DefaultsError, load_defaults


def test_a_defaults_file_reads_as_the_chart_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "defaults.yaml"
    path.write_text(
        "image: registry.example/batchmark-runner:1\n"
        "imagePullPolicy: IfNotPresent\n"
        "imagePullSecrets: [{name: pull}]\n"
        "resources: {limits: {memory: 16Gi}}\n"
        "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
        "nodeSelector: {pool: gpu}\n"
        "modelCache: {claimName: models, mountPath: /models}\n"
        "hfTokenSecret: {name: hf, key: token}\n"
        "queueName: benchmarks\n"
    )
    defaults = load_defaults(path)
    assert defaults.image == "registry.example/batchmark-runner:1"
    assert defaults.model_cache is not None
    assert defaults.model_cache.claim_name == "models"
    assert defaults.queue_name == "benchmarks"
    assert load_defaults(None).image is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("imagePullPolicy: Sometimes\n", "imagePullPolicy"),
        ("bogus: 1\n", "bogus: unknown key"),
        ("[1, 2", "cannot read"),
    ],
)
def test_a_bad_defaults_file_is_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "defaults.yaml"
    path.write_text(text)
    with pytest.raises(DefaultsError, match=message):
        load_defaults(path)
