"""Issue #29: a link is untrusted text. Every link parameter of every page (tests/app/matrix.py
LINK_PARAMS) gets every hostile value (HOSTILE): no exception, no link, image or HTML from the
value in any Markdown the page renders, every message bounded, and the session still serving.
One session per (page, value) carries that value in all of the page's parameters at once."""
from __future__ import annotations

import pytest

from tests.app.judge import long_messages, markup_problems, own_markup
from tests.app.matrix import HOSTILE, LINK_PARAMS, open_cell

PAGES = sorted({page for page, _, _ in LINK_PARAMS})


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
    assert not markup_problems(at, baseline[page]), (page, name, markup_problems(at, baseline[page]))
    assert not long_messages(at), (page, name, long_messages(at))
    at.run()  # the session still serves
    assert not at.exception, (page, name, [e.value for e in at.exception])
