"""Issue #28: every page, every tab or mode, on every kind of model: no exception, no error box a
valid setup should not show, the page's main charts drawn. The tables live in tests/app/matrix.py
(a new page or model kind is one line there).

One session per model kind walks every page (the model is loaded and the prompt traced once, as a
student's session would), so a failure names its page and view in the message."""

from __future__ import annotations

import pytest

from tfm.loaders.spec import format_spec, parse_spec
from ui.nav import SECTIONS

from tests.app.conftest import allow_models, charts
from tests.app.matrix import EXPECTED, MODELS, PAGES, PROMPT, needs, open_cell, set_view, spec_of

MODEL_PAGES = [page for page, p in PAGES.items() if not p.model_free]
# The quick tier (-m "not slow") walks one model of each way in: the bundled one, a random encoder, a
# Hugging Face folder, a GGUF file; CI walks every kind.
QUICK_KINDS = ("bundled", "bert-random", "hf-llama", "gguf-llama-q4_k")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One folder root for every file-backed model kind, written once per run."""
    return tmp_path_factory.mktemp("matrix_models")


def test_every_page_of_the_app_is_in_the_matrix():
    files = {f.removesuffix(".py") for entries in SECTIONS.values() for f, _, _ in entries}
    assert files == set(PAGES), f"add {sorted(files - set(PAGES))} to tests/app/matrix.py PAGES"


def check(at, page: str, kind: str, view: dict, want_charts: int) -> None:
    where = f"{page} on {kind} {view or ''}"
    assert not at.exception, (where, [e.value for e in at.exception])
    errors = [e.value for e in at.error]
    expected = EXPECTED.get((page, kind))
    if expected:
        assert errors and all(expected in e for e in errors), (where, errors)
        return
    assert not errors, (where, errors)
    if needs(page, kind):  # the page says in one line what it needs, and offers what fixes it
        words, button = needs(page, kind)
        assert any(words in i.value for i in at.info), (where, [i.value for i in at.info])
        assert any(b.key == button for b in at.button), where
        return
    assert len(charts(at)) >= want_charts, (where, len(charts(at)), "charts")


def walk(at, page: str, kind: str) -> None:
    """Every view of `page` in this session, then its button."""
    p = PAGES[page]
    for key, value in p.setup.items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}.py").run()
    for view, want in p.views:
        check(set_view(at, view), page, kind, view, want)
    if p.press and not EXPECTED.get((page, kind)) and not needs(page, kind):
        at.button(key=p.press).click().run()
        check(at, page, kind, {"pressed": p.press}, p.views[-1][1])
    example = f"{page}.example.0"
    if p.example is not None and not EXPECTED.get((page, kind)) and any(b.key == example for b in at.button):
        at.button(key=example).click().run()  # a prompt measured on this model, and the page's settings
        check(at, page, kind, {"pressed": example}, p.example)
        at.session_state["sidebar.prompt"] = at.session_state["keep.sidebar.prompt"] = PROMPT  # the next page's


@pytest.mark.parametrize("kind", [k if k in QUICK_KINDS else pytest.param(k, marks=pytest.mark.slow) for k in MODELS])
def test_every_page_on_model_kind(kind, folders):
    spec = spec_of(kind, folders)
    if spec.startswith("path:"):
        allow_models(folders)  # as a server started with --allow-models FOLDER
    first, *rest = MODEL_PAGES
    at = open_cell(first, spec, setup=PAGES[first].setup)
    if not spec.startswith("path:"):  # (a folder is shown resolved)
        assert at.session_state["app.model_spec"] == format_spec(parse_spec(spec)), [e.value for e in at.error]
    for page in MODEL_PAGES:
        walk(at, page, kind)


@pytest.mark.parametrize("page", [p for p, v in PAGES.items() if v.model_free])
def test_model_free_page(page):
    at = open_cell(page, None)
    walk(at, page, "bundled")
