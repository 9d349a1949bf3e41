"""Issue #29: a link is untrusted text. Every link parameter of every page (tests/app/matrix.py
LINK_PARAMS) gets every hostile value (HOSTILE): no exception, no link, image or HTML from the
value in any Markdown the page renders, every message bounded, and the session still serving.
One session per (page, value) carries that value in all of the page's parameters at once."""

from __future__ import annotations

import re

import pytest

from tests.app.judge import long_messages, markup_problems, own_markup
from tests.app.matrix import HOSTILE, LINK_PARAMS, open_cell

PAGES = sorted({page for page, _, _ in LINK_PARAMS})
# The quick tier (-m "not slow") sends one value of each sort (markup, HTML, huge, digits, invisible);
# CI sends them all.
QUICK_VALUES = ("heading", "html", "long", "20-digits", "null")


@pytest.fixture(scope="module")
def baseline():
    """Each page's own markup with harmless values, so only the value's markup is counted."""
    return {page: own_markup(open_cell(page, None)) for page in PAGES}


@pytest.mark.parametrize("name", [n if n in QUICK_VALUES else pytest.param(n, marks=pytest.mark.slow) for n in HOSTILE])
@pytest.mark.parametrize("page", PAGES)
def test_hostile_value_in_every_parameter_of_the_page(page, name, baseline):
    value = HOSTILE[name]
    params = {param: prefix + value for p, param, prefix in LINK_PARAMS if p == page}
    at = open_cell(page, None, params=params)
    assert not at.exception, (page, name, [e.value for e in at.exception])
    assert not markup_problems(at, baseline[page]), (page, name, markup_problems(at, baseline[page]))
    assert not long_messages(at), (page, name, long_messages(at))
    at.run()  # the session still serves
    assert not at.exception, (page, name, [e.value for e in at.exception])


# Every integer a link may carry, and the words a page uses for it (clamp_int names the setting).
INTEGER_PARAMS = [
    ("attention", "layer"),
    ("attention", "head"),
    ("next_token", "top_k"),
    ("tour", "pos"),
    ("tour", "layer"),
    ("tour", "head"),
    ("why", "pos"),
    ("tokens", "seed"),
    ("features", "feature"),
]


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
