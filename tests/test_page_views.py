"""Each page's settings are one typed, frozen view (`ui/views/`, issue #52): its link carries
what the page writes into the address, and reading that link back gives the same view."""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from pathlib import Path

import pytest

from ui.views import PageView, Sidebar

ROOT = Path(__file__).resolve().parents[1]
SIDEBAR_ONLY = {"tokens", "home", "look_at", "classroom"}  # pages with no settings but the sidebar's
# Pages of st.fragment sections, each rerun alone with its own controls (one view would rerun them all).
FRAGMENTS = {"experiments"}


def view_classes() -> dict[str, type]:
    """Every view: the Sidebar and each `ui/views/<page>.py`'s PageView subclasses."""
    found = {"Sidebar": Sidebar}
    for path in sorted((ROOT / "ui" / "views").glob("[a-z]*.py")):
        module = importlib.import_module(f"ui.views.{path.stem}")
        found |= {
            name: c
            for name, c in vars(module).items()
            if isinstance(c, type) and issubclass(c, PageView) and c.__module__ == module.__name__
        }
    return found


def example(kind, n: int):
    """A value of the field's type that is no default: a link must carry it back unchanged."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    if typing.get_origin(kind) is typing.Literal:
        return typing.get_args(kind)[-1]
    samples = {bool: True, int: 7 + n, float: 0.25 + n, str: f"a b&c=d #{n} ünï"}
    return samples.get(kind, object())  # not in the link: handed through unchanged


def non_default(cls):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: example(hints[f.name], i) for i, f in enumerate(dataclasses.fields(cls))})


@pytest.mark.parametrize("name", sorted(view_classes()))
def test_a_view_is_frozen_and_survives_its_link(name):
    cls = view_classes()[name]
    assert cls.__dataclass_params__.frozen
    view = non_default(cls)
    query = view.link()
    assert set(query) == set(cls.LINK.values()) and all(isinstance(v, str) for v in query.values())
    assert cls.from_link(query, **view.unlinked()) == view
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(view, dataclasses.fields(cls)[0].name, None)


def test_every_moved_page_has_a_view():
    from tests.test_page_rules import TOP_LEVEL_LEFT, pages

    moved = {p.stem for p in pages()} - TOP_LEVEL_LEFT - SIDEBAR_ONLY - FRAGMENTS
    have = {p.stem for p in (ROOT / "ui" / "views").glob("[a-z]*.py")}
    assert moved <= have, f"a page in functions builds its view from ui/views/<page>.py: {moved - have}"
    for stem in moved:
        text = (ROOT / "pages" / f"{stem}.py").read_text(encoding="utf-8")
        assert f"ui.views.{stem}" in text or f"ui.views import {stem}" in text, stem
    for stem in FRAGMENTS:
        assert "@st.fragment" in (ROOT / "pages" / f"{stem}.py").read_text(encoding="utf-8"), stem


def test_the_round_trip_catches_a_field_that_does_not_parse_back():
    @dataclasses.dataclass(frozen=True)
    class Lossy(PageView):
        LINK: typing.ClassVar = {"layer": "layer"}
        layer: tuple

    view = Lossy((1, 2))
    assert Lossy.from_link({"layer": "(1, 2)"}) != view  # tuple("(1, 2)") is characters, not the tuple
    assert Sidebar.from_link({"seed": "3"}, spec="s", prompt="p", device="cpu").seed == 3
