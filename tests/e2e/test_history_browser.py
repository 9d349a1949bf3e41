"""Opening a shared link adds one browser history entry, so one Back leaves the page (issue #40).

Streamlit's frontend answers every query string the script sets with `history.pushState`
(`handlePageInfoChanged`; it replaces only while the user walks the history). The app used to
write the settings a link left out (`&model=default&prompt=...&seed=0&device=cpu&head=0`) on
the page's first run: a second entry, and Back needed two presses. Now settings at their
defaults stay out of the address (`ui.links.url_set(defaults=...)`); a change the user makes
still goes into it, so the address stays a link to what is shown."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.test_attention_browser import PLOT, SLOW, expect_title, idle, press


def test_one_back_leaves_a_page_opened_by_link(page, app_url):
    page.set_default_timeout(SLOW)
    page.goto("about:blank")
    page.goto(f"{app_url}/attention?layer=1")
    expect_title(page, "Layer 1, head 0")
    page.wait_for_timeout(1500)  # a late address update would come within this
    assert page.url == f"{app_url}/attention?layer=1"
    assert page.evaluate("history.length") == 2
    page.go_back()
    expect(page).to_have_url("about:blank")

    page.go_forward()  # the link again: a change the user makes goes into the address
    expect_title(page, "Layer 1, head 0")
    press(page, "Head", "ArrowRight", 2)
    expect_title(page, "Layer 1, head 2")
    assert "layer=1" in page.url and "head=2" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0 and page.locator(PLOT).count() == 1
    idle(page)
