"""A fresh server's first page never shows Streamlit's own list of page file stems.

With a `pages/` folder next to app.py, Streamlit runs a fresh server's first requests in its
legacy pages mode, whose sidebar listed "app, attention, attribution graph, classroom, ..." over
an empty page for seconds, until app.py's st.navigation replaced it (issue #52).
.streamlit/config.toml hides that list and app.py shows its own (ui.st_private.navigation). A
MutationObserver installed before the page's scripts records every sidebar navigation label the
page ever holds (its callbacks run before the browser paints), from the first byte to idle.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import context, shot, streamlit_server, wait_idle
from ui.nav import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
SLOW = 180_000
RECORD = """(() => { window.__tfmNav = new Set();
  const look = () => document.querySelectorAll('[data-testid="stSidebarNav"] a').forEach(a =>
      window.__tfmNav.add(a.textContent.trim()));
  new MutationObserver(look).observe(document, {childList: true, subtree: true, characterData: true}); })();"""


def stem_labels() -> set[str]:
    """The labels Streamlit's legacy mode gives app.py and each pages/ file (its stem, _ as space)."""
    return {"app", *(p.stem.replace("_", " ") for p in (ROOT / "pages").glob("*.py"))}


def titles() -> set[str]:
    return {title for pages in SECTIONS.values() for _, title, _ in pages}


@pytest.mark.parametrize("path", ["", "tokens"], ids=["root", "tokens"])
def test_a_fresh_servers_first_paint_shows_no_file_stem_list(browser, path):
    assert not stem_labels() & titles()  # else a stem could not be told from the app's own label
    with streamlit_server(log_name=f"server-first-paint-{path or 'root'}") as url:
        ctx = context(browser, viewport={"width": 1400, "height": 1000})
        ctx.add_init_script(RECORD)
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        try:
            page.goto(f"{url}/{path}")
            nav = page.get_by_test_id("stSidebarNav")
            expect(nav).to_contain_text("Look inside", timeout=SLOW)  # app.py's sections
            wait_idle(page, timeout=SLOW)
            seen = set(page.evaluate("[...window.__tfmNav]"))
            assert titles() <= seen, f"the recorder missed the app's own links: {sorted(titles() - seen)}"
            assert not seen & stem_labels(), f"Streamlit's file stem list was shown: {sorted(seen & stem_labels())}"
            shot(page, f"first-paint-{path or 'root'}")
        finally:
            ctx.close()
