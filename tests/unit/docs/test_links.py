"""The README and the pages in docs/ link only to files and sections that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    prose = re.sub(r"`[^`\n]*`", "", page.read_text(encoding="utf-8"))  # code (a pattern) is no link
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)} links to what does not exist"
