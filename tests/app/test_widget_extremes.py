"""Issue #28 item 4 (and #40: on a grouped-query model too): on the bundled model and on a random
model of SmolLM2's shape, every keyed control of every page (tests/app/matrix.py
PAGES) moved to its extremes once: sliders and numbers to both ends, every option of a select
or radio (a long list: its first, middle and last), text empty and over the size limit, check
boxes both ways. No exception. The sidebar's model-config
controls are left to the matrix's model kinds (a preset there is a whole model to build)."""

from __future__ import annotations

import pytest

from services import server

from tests.app.controls import choose, control, keyed
from tests.app.matrix import MODELS, PAGES, open_cell

BIG = 10**12  # a number input without a maximum gets this (it must be refused or clamped, not crash)


def few(options: list) -> list:
    return list(options) if len(options) <= 6 else [options[0], options[len(options) // 2], options[-1]]


def extremes(kind: str, el) -> list:
    """The values one control is moved to, in order."""
    if kind == "slider":
        return [el.min, el.max]
    if kind == "number_input":
        return [el.min if el.min is not None else -BIG, el.max if el.max is not None else BIG]
    if kind in ("select_slider", "selectbox", "radio"):
        return few(el.options)
    if kind == "multiselect":
        return [[], few(el.options)]
    if kind in ("text_input", "text_area"):
        cap = el.max_chars or server.limits().max_prompt_chars + 4
        return ["", "x" * cap]
    return [True, False]


# The bundled model, and a random model of the default model's shape (SmolLM2: 9 query heads sharing
# 3 key/value heads), where the Tour once crashed at head 3; pages that ignore the model run once.
CELLS = [
    (page, kind)
    for page in PAGES
    for kind in ("bundled", "smollm2-gqa")
    if kind == "bundled" or not PAGES[page].model_free
]
CELLS += [(page, "minilm") for page in ("attention", "similarity", "tokens")]  # an encoder's own controls


# The quick tier (-m "not slow") moves the Attention page's controls; CI every page's.
QUICK_PAGES = ("attention",)


@pytest.mark.parametrize(
    ("page", "kind"),
    [c if c[0] in QUICK_PAGES else pytest.param(*c, marks=pytest.mark.slow) for c in CELLS],
    ids=[f"{p}-{k}" for p, k in CELLS],
)
def test_every_control_at_its_extremes(page, kind, experiments_once):
    at = open_cell(page, MODELS[kind], setup=PAGES[page].setup)
    assert not at.exception, [e.value for e in at.exception]
    moved, done = 0, set()
    while todo := [(kind, key) for kind, key in keyed(at) if key not in done]:  # controls a mode showed too
        for kind, key in todo:
            done.add(key)
            try:
                initial = first_label(kind, control(at, kind, key))
            except KeyError:  # hidden by an earlier control's mode: met again once a mode shows it
                done.discard(key)
                continue
            moved += move(at, page, kind, key, initial)
        if all(key in done for _, key in keyed(at)):
            break
    assert moved or not keyed(at), page


def first_label(kind: str, el):
    """A mode switch's label before the moves (radio and selectbox: they show or hide controls)."""
    return el.options[el.index] if kind in ("radio", "selectbox") and el.index is not None else None


def move(at, page: str, kind: str, key: str, initial) -> int:
    """Each extreme of one control, then a mode switch's first label again (its modes' controls come back)."""
    n = 0
    for value in [*extremes(kind, control(at, kind, key)), *([initial] if initial is not None else [])]:
        try:
            el = control(at, kind, key)
        except KeyError:  # an earlier extreme hid it (e.g. a mode without this control)
            break
        choose(el, value).run()
        n += 1
        assert not at.exception, (page, key, str(value)[:40], [e.value for e in at.exception])
    return n
