"""A run that changes nothing tells the browser to change no widget.

A widget whose key the script writes in a run (`st.session_state[key] = value`, even the value it
already holds) is sent with `set_value`: when that run ends, the browser shows the script's value
in place of what the person did meanwhile. Written every run, it lost input for real: a second
arrow key on the Attention page's Layer slider (the first reached the server, the second was
overwritten by the run the first started), and every page's sidebar prompt, seed and model on
each run. Settings are put in range with `ui.links.put`, which writes only a change."""

from __future__ import annotations

import pytest

from tests.app.conftest import open_page
from tests.app.matrix import PAGES


def overwritten(block) -> list[str]:
    """Keys (or types) of the widgets in `block` that this run told the browser to overwrite."""
    out = []
    for child in getattr(block, "children", {}).values():
        out += overwritten(child)
    proto = getattr(block, "proto", None)
    if proto is not None and getattr(proto, "set_value", False):
        out.append(getattr(block, "key", None) or type(block).__name__)
    return out


@pytest.fixture(scope="module")
def session():
    return open_page("home")


@pytest.mark.parametrize("page", list(PAGES))
def test_a_plain_rerun_overwrites_no_widget(session, page):
    at = session
    for key, value in PAGES[page].setup.items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.run()  # nothing changed: the browser keeps every value the person sees
    assert overwritten(at.main) + overwritten(at.sidebar) == [], page
