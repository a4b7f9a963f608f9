"""`batchmark operator --defaults FILE`: camelCase YAML, every key optional, unknown keys refused by name; a
hostile file is refused with the bounds of a run config, in one line that names the option and the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from batchmark.operator.controller.service import DefaultsError, load_defaults
from batchmark.operator.resource.api import StartBounds
from batchmark.runner.cli import main
from batchmark.runner.contract import EXIT_USAGE


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
        "timeouts:\n  containerCreate: 900\n  imagePull: 900\n  pending: 3600\n"
    )
    defaults = load_defaults(path)
    assert defaults.image == "registry.example/batchmark-runner:1"
    assert defaults.model_cache is not None
    assert defaults.model_cache.claim_name == "models"
    assert defaults.queue_name == "benchmarks"
    assert defaults.timeouts == StartBounds(pending=3600, image_pull=900, container_create=900)
    assert load_defaults(None).image is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("imagePullPolicy: Sometimes\n", "imagePullPolicy"),
        ("bogus: 1\n", "bogus: unknown key"),
        ("securityContext:\n  runAsUser: 0\n", "securityContext.runAsUser: Input should be greater than or equal to 1"),
        ("securityContext:\n  runAsGroup: -1\n", "securityContext.runAsGroup"),
        ("securityContext:\n  runAsUsr: 5\n", "securityContext.runAsUsr: unknown key"),
        ("[1, 2", "not YAML"),
        ("timeouts:\n  pending: 0\n", "timeouts.pending: Input should be greater than or equal to 1"),
        ("timeouts:\n  imagePull: null\n", "timeouts.imagePull"),
        ("timeouts:\n  pendng: 5\n", "timeouts.pendng: unknown key"),
        ("timeouts: 5\n", "timeouts"),
    ],
)
def test_a_bad_defaults_file_is_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "defaults.yaml"
    path.write_text(text)
    with pytest.raises(DefaultsError, match=message):
        load_defaults(path)


def billion_laughs(levels: int = 9) -> str:
    """Each level refers to the one before ten times: under 1 kB of YAML, 10**9 nodes once expanded."""
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]" for level in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


HOSTILE_DEFAULTS: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    "huge": (lambda t: write(t / "defaults.yaml", "# padding\n" * 120_000), ["larger than 1 MiB"]),
    "binary": (lambda t: write(t / "defaults.yaml", bytes(range(256))), ["not UTF-8 text (byte 128)"]),
    "alias bomb": (lambda t: write(t / "defaults.yaml", billion_laughs()), ["once its aliases are expanded"]),
    "alias that holds itself": (
        lambda t: write(t / "defaults.yaml", "resources: &loop {limits: *loop}\n"),
        ["an alias holds itself"],
    ),
    "duplicate keys": (
        lambda t: write(t / "defaults.yaml", "image: a:1\nqueueName: q\nimage: b:2\n"),
        ["'image' twice", "line 3"],
    ),
    "deeply nested": (lambda t: write(t / "defaults.yaml", "[" * 5000 + "]" * 5000), ["nested too deeply"]),
    "a directory": (lambda t: t, ["cannot read it: Is a directory"]),
    "missing": (lambda t: t / "absent.yaml", ["absent.yaml", "cannot read it: No such file or directory"]),
    "a list": (lambda t: write(t / "defaults.yaml", "- image: a\n"), ["(file)", "dictionary"]),
    "markup in its name": (lambda t: write(t / "[red]x.yaml", "bogus: 1\n"), ["[red]x.yaml"]),
}


@pytest.mark.parametrize("case", list(HOSTILE_DEFAULTS))
def test_a_hostile_defaults_file_is_refused_in_one_line_naming_the_option_and_the_file(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_path, named = HOSTILE_DEFAULTS[case]
    path = make_path(tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(DefaultsError) as refused:
        load_defaults(path)
    assert str(refused.value).startswith(f"--defaults: {path}: ")
    assert "\n" not in str(refused.value)
    # The command refuses it before it starts anything, the same way: exit 2, one line, the file named literally.
    assert main(["operator", "--defaults", str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    message = captured.err.strip()
    assert message.startswith(f"batchmark operator: error: --defaults: {path}: "), message
    for text in named:
        assert text in message, message
    assert "Traceback" not in message
    assert sorted(tmp_path.iterdir()) == before


def test_an_empty_defaults_file_sets_nothing(tmp_path: Path) -> None:
    assert load_defaults(write(tmp_path / "defaults.yaml", "")) == load_defaults(None)
