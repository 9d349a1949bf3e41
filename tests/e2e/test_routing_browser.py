"""A fresh server's very first request, for the root or a shared link, gets the full app, and its
first paint never shows Streamlit's own list of page file stems.

Streamlit treats a `pages/` folder as a legacy page list until some run calls st.navigation,
so a first request for /attention used to run the page without app.py (no layout, no
sections) and /next_token-style pages whose URL differed from the file showed "Page not
found". That legacy mode's sidebar also listed "app, attention, attribution graph, classroom,
..." over an empty page for seconds, until app.py's st.navigation replaced it (issue #52).
.streamlit/config.toml hides that list and app.py shows its own (ui.st_private.navigation). A
MutationObserver installed before the page's scripts records every sidebar navigation label the
page ever holds (its callbacks run before the browser paints), from the first byte to idle.
Each case here needs its own fresh server: the first request is the whole point, and both
checks read that same first request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import context, shot, streamlit_server, wait_idle
from ui.nav import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
SLOW = 180_000
CASES = [  # (url path and query, page heading, a chart title the query must produce or None)
    ("", "tfm: see inside a transformer", None),
    ("attention?layer=1&head=2", "Attention", "Layer 1, head 2"),
    ("next_token?t=0.5", "Next-token sampling", None),
    ("encdec", "The 2017 Transformer: encoder-decoder, trained live", None),
]
RECORD = """(() => { window.__tfmNav = new Set();
  const look = () => document.querySelectorAll('[data-testid="stSidebarNav"] a').forEach(a =>
      window.__tfmNav.add(a.textContent.trim()));
  new MutationObserver(look).observe(document, {childList: true, subtree: true, characterData: true}); })();"""


def stem_labels() -> set[str]:
    """The labels Streamlit's legacy mode gives app.py and each pages/ file (its stem, _ as space)."""
    return {"app", *(p.stem.replace("_", " ") for p in (ROOT / "pages").glob("*.py"))}


def titles() -> set[str]:
    return {title for pages in SECTIONS.values() for _, title, _ in pages}


def name(path: str) -> str:
    return path.split("?")[0] or "root"


@pytest.mark.parametrize("path,heading,title", CASES, ids=[name(c[0]) for c in CASES])
def test_first_request_gets_the_whole_app_and_no_file_stem_list(browser, path, heading, title):
    assert not stem_labels() & titles()  # else a stem could not be told from the app's own label
    with streamlit_server(log_name=f"server-routing-{name(path)}") as url:
        ctx = context(browser, viewport={"width": 1400, "height": 1000})
        ctx.add_init_script(RECORD)
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        try:
            page.goto(f"{url}/{path}")
            nav = page.get_by_test_id("stSidebarNav")
            expect(nav).to_contain_text("Look inside", timeout=SLOW)  # app.py's sections, not a file list
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
            wait_idle(page, timeout=SLOW)
            first_paint_had_no_stem_list(page)
            whole_app_on_the_page_asked_for(page, url, path, title)
            shot(page, f"routing-{name(path)}")
        finally:
            ctx.close()


def first_paint_had_no_stem_list(page) -> None:
    seen = set(page.evaluate("[...window.__tfmNav]"))
    assert titles() <= seen, f"the recorder missed the app's own links: {sorted(titles() - seen)}"
    assert not seen & stem_labels(), f"Streamlit's file stem list was shown: {sorted(seen & stem_labels())}"


def whole_app_on_the_page_asked_for(page, url: str, path: str, title: str | None) -> None:
    expect(page.get_by_test_id("stSidebarNav").get_by_role("link", name="Logit lens")).to_be_visible()
    expect(page.get_by_text("Page not found")).to_have_count(0)
    assert page.url.startswith(f"{url}/{path.split('?')[0]}")  # still on the page asked for
    if title:
        expect(page.locator('[data-testid="stPlotlyChart"] .gtitle').first).to_contain_text(title, timeout=SLOW)
        assert "layer=1" in page.url and "head=2" in page.url
    # the wide layout comes from app.py's set_page_config
    width = page.get_by_test_id("stMainBlockContainer").evaluate("el => el.getBoundingClientRect().width")
    assert width > 900, width
