"""The house drawing in docs/architecture.md, drawn from the code: for each layered package, its rooms (the
layers of its import-linter contract in pyproject.toml, in order) and which room imports which.

A room may import only the rooms drawn after it, so every mark lies right of the diagonal; a mark left of it
would be an arrow running back up, and a circle needs one. `python docs/house.py` rewrites the drawing in place;
tests/unit/docs/test_house.py fails when the page's drawing is not the code's.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- house: drawn by docs/house.py -->", "<!-- house: end -->"
IMPORTS, ITSELF, UPWARD = "●", "·", "▲"


def layered_contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]


def rooms(contract: dict[str, Any]) -> list[str]:
    """The contract's layers in order, siblings of one layer (``a | b``) side by side."""
    return [room.strip() for layer in contract["layers"] for room in re.split(r"[|:]", layer)]


def room_imports(graph: grimp.ImportGraph, container: str, names: list[str]) -> set[tuple[str, str]]:
    """(importer, imported) for every direct import from one room of ``container`` into another."""

    def room_of(module: str) -> str | None:
        for name in names:
            full = f"{container}.{name}"
            if module == full or module.startswith(full + "."):
                return name
        return None

    pairs = set()
    for module in graph.modules:
        importer = room_of(module)
        if importer is None:
            continue
        for imported_module in graph.find_modules_directly_imported_by(module):
            imported = room_of(imported_module)
            if imported is not None and imported != importer:
                pairs.add((importer, imported))
    return pairs


def matrix(container: str, names: list[str], pairs: set[tuple[str, str]]) -> str:
    width = max(map(len, names))
    numbers = "".join(f"{index:>3}" for index in range(1, len(names) + 1))
    lines = [f"{container}: room (row) imports room (column)", f"{'':>{width + 4}}{numbers}"]
    for row, importer in enumerate(names):
        cells = []
        for column, imported in enumerate(names):
            if row == column:
                cells.append(ITSELF)
            elif (importer, imported) in pairs:
                cells.append(IMPORTS if column > row else UPWARD)
            else:
                cells.append(" ")
        lines.append(f"{row + 1:>2} {importer:<{width}} " + "".join(f"{cell:>3}" for cell in cells).rstrip())
    return "\n".join(lines)


def drawing() -> str:
    graph = grimp.build_graph("batchmark")
    blocks = []
    for contract in layered_contracts():
        (container,) = contract["containers"]
        names = rooms(contract)
        blocks.append(matrix(container, names, room_imports(graph, container, names)))
    return "\n\n".join(blocks)


def page_with(text: str, drawn: str) -> str:
    before, _, rest = text.partition(BEGIN)
    _, _, after = rest.partition(END)
    return f"{before}{BEGIN}\n```text\n{drawn}\n```\n{END}{after}"


if __name__ == "__main__":
    page = PAGE.read_text(encoding="utf-8")
    if BEGIN not in page or END not in page:
        sys.exit(f"{PAGE}: no {BEGIN} ... {END} markers to draw between")
    PAGE.write_text(page_with(page, drawing()), encoding="utf-8")
