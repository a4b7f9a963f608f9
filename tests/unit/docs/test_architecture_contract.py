"""docs/architecture.md's contract section says what runner/batchmark/runner/contract.py says: the status fields each
side writes, the pod's environment, the keys, paths and exit codes; everything it quotes is in contract.py."""

from __future__ import annotations

import re
from pathlib import Path

from batchmark.runner import contract

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "architecture.md"
SECTION_TITLE = "## The operator–runner contract"
# What the section quotes besides contract.py's names and values: where it lives, and words of Kubernetes.
NOT_IN_THE_CONTRACT = {
    "runner/batchmark/runner/contract.py",
    "statusfields.py",  # where the models of the runner's status fields live, beside contract.py
    "binaryData",
    "spec.dataVolume",
    "<pod>-results",
    "operator",  # the extra
}


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert SECTION_TITLE in text, f"docs/architecture.md has no section {SECTION_TITLE!r}"
    return text.split(SECTION_TITLE, 1)[1].split("\n## ", 1)[0]


def listed(name: str) -> list[str]:
    """The names the section quotes in the first parentheses after a contract.py name: `NAME`, words (`a`, `b`)."""
    match = re.search(rf"`{name}`[^()]*?\(([^)]*)\)", section())
    assert match, f"the contract section lists no {name}"
    return re.findall(r"`([^`]+)`", match.group(1))


def contract_values() -> set[str]:
    """Every string contract.py names, with the members of its sets and tuples."""
    values: set[str] = set()
    for name in dir(contract):
        value = getattr(contract, name)
        if isinstance(value, str):
            values.add(value)
        elif isinstance(value, frozenset | tuple) and all(isinstance(member, str) for member in value):
            values |= set(value)
    return values


def test_the_status_fields_each_side_writes_are_contract_pys() -> None:
    for name in ("RUNNER_STATUS_FIELDS", "OPERATOR_STATUS_FIELDS", "OPERATOR_FALLBACK_FIELDS"):
        fields = listed(name)
        assert len(fields) == len(set(fields)), f"{name} names a field twice: {fields}"
        assert set(fields) == getattr(contract, name), f"docs/architecture.md's {name} differs from contract.py's"


def test_the_pods_environment_is_contract_pys() -> None:
    assert set(listed("POD_ENVIRONMENT")) == set(contract.POD_ENVIRONMENT)
    quoted = set(re.findall(r"`(BATCHMARK_[A-Z_]+)`", section()))
    variables = {getattr(contract, name) for name in dir(contract) if name.startswith("ENV_")}
    assert quoted == variables, "the contract section must name every environment variable of contract.py, no other"


def test_the_exit_codes_are_contract_pys() -> None:
    match = re.search(r"the exit codes of `batchmark run` \(([^)]*)\)", section())
    assert match
    said = dict(re.findall(r"(\d+(?: \+ N)?) ([^,]+)", " ".join(match.group(1).split())))
    assert said == {
        str(contract.EXIT_OK): "done",
        str(contract.EXIT_FAILED): "a bug",
        str(contract.EXIT_USAGE): "bad input",
        str(contract.EXIT_ENGINE_FAILED): "the engine failed",
        str(contract.EXIT_OUTPUT_FAILED): "an output failed",
        f"{contract.EXIT_SIGNAL_BASE} + N": "a signal",
    }


def test_everything_the_section_quotes_is_in_contract_py() -> None:
    quoted = set(re.findall(r"`([^`]+)`", section())) - {"batchmark run"}
    known = contract_values() | set(dir(contract)) | NOT_IN_THE_CONTRACT
    assert sorted(quoted - known) == []
    for value in (contract.CONFIG_PATH, contract.TERMINATION_MESSAGE_PATH, contract.REPORT_KEY):
        assert f"`{value}`" in section()
    for value in (contract.GROUP, contract.VERSION, contract.KIND, contract.PLURAL):
        assert f"`{value}`" in section()
