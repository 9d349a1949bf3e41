"""A shared link opened as a fresh server's very first request gets the full app.

Streamlit treats a `pages/` folder as a legacy page list until some run calls st.navigation,
so a first request for /attention used to run the page without app.py (no layout, no
sections) and /next_token-style pages whose URL differed from the file showed "Page not
found". Each case here needs its own fresh server: the first request is the whole point.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import context, shot, streamlit_server, wait_idle

SLOW = 180_000
CASES = [  # (url path and query, page heading, a chart title the query must produce or None)
    ("attention?layer=1&head=2", "Attention", "Layer 1, head 2"),
    ("next_token?t=0.5", "Next-token sampling", None),
    ("encdec", "The 2017 Transformer: encoder-decoder, trained live", None),
]


@pytest.mark.parametrize("path,heading,title", CASES, ids=[c[0].split("?")[0] for c in CASES])
def test_first_request_for_a_page_gets_the_whole_app(browser, path, heading, title):
    with streamlit_server(log_name=f"server-routing-{path.split('?')[0]}") as url:
        ctx = context(browser, viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        try:
            page.goto(f"{url}/{path}")
            expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
            wait_idle(page, timeout=SLOW)
            nav = page.get_by_test_id("stSidebarNav")
            expect(nav).to_contain_text("Look inside")  # app.py's sections, not a file list
            expect(nav.get_by_role("link", name="Logit lens")).to_be_visible()
            expect(page.get_by_text("Page not found")).to_have_count(0)
            assert page.url.startswith(f"{url}/{path.split('?')[0]}")  # still on the page asked for
            if title:
                expect(page.locator('[data-testid="stPlotlyChart"] .gtitle').first).to_contain_text(title, timeout=SLOW)
                assert "layer=1" in page.url and "head=2" in page.url
            # the wide layout comes from app.py's set_page_config
            width = page.get_by_test_id("stMainBlockContainer").evaluate("el => el.getBoundingClientRect().width")
            assert width > 900, width
            shot(page, f"routing-{path.split('?')[0]}")
        finally:
            ctx.close()
