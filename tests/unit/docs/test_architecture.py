"""docs/architecture.md stays true as code moves: every file and folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "architecture.md"
ABBREVIATIONS = {"runner/.../": "runner/batchmark/runner/", "operator/.../": "operator/batchmark/operator/"}
TREE_COLUMN = 30  # the width of the names' column in the page's tree
CHECKED_FOLDERS = ("runner/", "operator/", "tests/", "scripts/", "docker/", "charts/", "dashboards/", "devtools/")


def tree_paths(text: str) -> list[str]:
    """The paths of the page's tree: a folder at the margin, then the names indented under it."""
    block = text.split("```", 2)[1]
    paths: list[str] = []
    folder = ""
    for line in block.splitlines()[1:]:
        names = line[:TREE_COLUMN].strip()
        if not names:
            continue
        if not line.startswith(" "):
            folder = names
            paths.append(folder)
            continue
        paths += [folder + name.strip() for name in names.split(",") if name.strip()]
    return paths


def quoted_paths(text: str) -> list[str]:
    """Paths quoted in the prose and the table: anything in backticks with a slash or a file's extension."""
    found = []
    for quoted in re.findall(r"`([^`\s]+)`", text):
        path = quoted
        for short, full in ABBREVIATIONS.items():
            path = path.replace(short, full)
        if path.startswith(CHECKED_FOLDERS):
            found.append(path)
    return found


def test_every_path_the_architecture_page_names_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    paths = tree_paths(text) + quoted_paths(text)
    assert len(paths) > 40
    missing = [path for path in paths if "*" not in path and not (ROOT / path).exists()]
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_the_readme_links_the_architecture_page() -> None:
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
