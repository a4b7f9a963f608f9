"""What the tests need to know about a dashboard's PromQL: the queries, their variables, the series they name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

# Words of PromQL that look like series names: operators, modifiers, and aggregation clauses.
KEYWORDS: Final = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"inf", "nan"}
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*+)(?!\s*\()")


def series_names(expr: str) -> set[str]:
    """The metric names an expression selects (functions, label names and keywords left out)."""
    bare = _RANGES.sub(" ", _MATCHERS.sub(" ", _LABEL_LISTS.sub(" ", _STRINGS.sub('""', expr))))
    return {name for name in _IDENTIFIER.findall(bare) if name.lower() not in KEYWORDS}


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expr) for every PromQL expression of a dashboard's JSON: panel targets (rows' panels
    included), variable queries and annotations."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            yield from walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                yield f"panel {panel['title']!r} {target['refId']}", target["expr"]

    yield from walk(board.get("panels", []))
    for variable in board.get("templating", {}).get("list", []):
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"]["query"])
            assert match is not None, variable
            yield f"variable {variable['name']}", match.group(1)
    for annotation in board.get("annotations", {}).get("list", []):
        yield f"annotation {annotation['name']!r}", annotation["expr"]


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's interpolation of `$name` and `${name}` (longest names first), as a data source would see it."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    leftover = re.findall(r"\$\{?\w+", expr)
    assert not leftover, f"unsubstituted {leftover} in {expr}"
    return expr
