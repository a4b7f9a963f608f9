"""docs/architecture.md's house drawing is the code's: its rooms, and no arrow running back up."""

from __future__ import annotations

from docs import house


def test_the_page_draws_the_house_the_code_builds() -> None:
    page = house.PAGE.read_text(encoding="utf-8")
    assert page == house.page_with(page, house.drawing()), "the drawing is stale: run `python docs/house.py`"


def test_no_room_imports_a_room_above_it() -> None:
    drawn = house.drawing()
    assert house.IMPORTS in drawn
    assert house.UPWARD not in drawn


def test_a_room_importing_one_above_it_is_drawn_as_an_arrow_back_up() -> None:
    names = ["top", "bottom"]
    drawn = house.matrix("example", names, {("bottom", "top")})
    assert house.UPWARD in drawn.splitlines()[3]
