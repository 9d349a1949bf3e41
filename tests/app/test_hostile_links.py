"""Issue #29: a link is untrusted text. Every link parameter of every page (tests/app/matrix.py
LINK_PARAMS) gets every hostile value (HOSTILE): no exception, no link, image or HTML from the
value in any Markdown the page renders, every message bounded, and the session still serving.
One session per (page, value) carries that value in all of the page's parameters at once."""
from __future__ import annotations

import re

import pytest

from tests.app.matrix import HOSTILE, LINK_PARAMS, open_cell

PAGES = sorted({page for page, _, _ in LINK_PARAMS})
MAX_MESSAGE = 1_000  # characters of any alert or caption (the values are cut to ~80 + their length)
# Markup that would draw a link, an image or HTML once escaped characters are taken out.
MARKUP = re.compile(r"\]\(|<img|<a\s|https?://|www\.|\w@\w|<https")  # (a zero-width space breaks the last three)
MARKDOWN_KINDS = ("error", "warning", "info", "success", "caption", "markdown", "toast", "exception")


def rendered(at) -> list[str]:
    """The Markdown source of every element that renders Markdown, with the value's own text."""
    out = []
    for kind in MARKDOWN_KINDS:
        out += [str(getattr(el, "value", "")) for el in at.get(kind)]
    return out


def unescaped(source: str) -> str:
    """What Markdown acts on: a backslash-escaped character is plain text, so drop it."""
    return re.sub(r"\\.", "", source)


def own_markup(at) -> set[str]:
    """Markup the page writes itself (its own links, if any), seen with a harmless link."""
    return {m.group(0) for text in rendered(at) for m in MARKUP.finditer(unescaped(text))}


@pytest.fixture(scope="module")
def baseline():
    """Each page's own markup with harmless values, so only the value's markup is counted."""
    return {page: own_markup(open_cell(page, None)) for page in PAGES}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("page", PAGES)
def test_hostile_value_in_every_parameter_of_the_page(page, name, baseline):
    value = HOSTILE[name]
    params = {param: prefix + value for p, param, prefix in LINK_PARAMS if p == page}
    at = open_cell(page, None, params=params)
    assert not at.exception, (page, name, [e.value for e in at.exception])
    for text in rendered(at):
        found = {m.group(0) for m in MARKUP.finditer(unescaped(text))} - baseline[page]
        assert not found, (page, name, found, text[:300])
    for el in [*at.error, *at.warning, *at.info, *at.caption]:
        assert len(el.value) <= MAX_MESSAGE, (page, name, len(el.value), el.value[:200])
    at.run()  # the session still serves
    assert not at.exception, (page, name, [e.value for e in at.exception])


# Every integer a link may carry, and the words a page uses for it (clamp_int names the setting).
INTEGER_PARAMS = [("attention", "layer"), ("attention", "head"), ("next_token", "top_k"), ("tour", "pos"),
                  ("tour", "layer"), ("tour", "head"), ("why", "pos"), ("tokens", "seed"), ("features", "feature")]


@pytest.mark.parametrize("value", ["-1", "9" * 20])
@pytest.mark.parametrize("page, param", INTEGER_PARAMS)
def test_an_integer_out_of_range_in_a_link_is_never_changed_silently(page, param, value):
    """Issue #40: `/features?feature=-1` opened feature 583 without a word. Each integer link
    parameter out of range is ignored or moved into range, and a message quotes the value."""
    assert {(p, q) for p, q, _ in LINK_PARAMS} >= set(INTEGER_PARAMS)
    at = open_cell(page, None, params={param: value})
    assert not at.exception, (page, param, [e.value for e in at.exception])
    said = [re.sub(r"\\(.)", r"\1", el.value) for el in [*at.warning, *at.info, *at.error]]
    assert any(value in text for text in said), (page, param, said)


def test_a_device_this_server_lacks_is_ignored_with_a_word():
    from tfm.loaders.loading import available_devices
    at = open_cell("tokens", None, params={"device": "tpu"})
    assert not at.exception
    said = f"Ignored the link's device=tpu: this server has {', '.join(available_devices())}."
    assert any(said == w.value for w in at.warning), [w.value for w in at.warning]
    assert at.selectbox(key="sidebar.device").value == available_devices()[-1]
