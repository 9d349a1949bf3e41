"""Tour in real Chromium: presentation mode walked with the keyboard, the normal page on a tall
window, and the checks on a phone-sized window. Screenshots go to screenshots/ (look at them)."""

from __future__ import annotations

from tests.e2e.conftest import context, shot
from tests.e2e.conftest import wait_idle as _wait_idle

SLOW = 240_000


def wait_idle(page) -> None:
    _wait_idle(page, SLOW)


def header(page) -> str:
    return page.locator('[data-testid="stHeading"] h2').first.inner_text()


def test_presentation_mode_walks_with_the_arrow_keys(browser, app_url):
    ctx = context(browser, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(SLOW)
    page.goto(f"{app_url}/tour?present=1&step=tokens")
    wait_idle(page)
    # the projector view has no sidebar (its CSS arrives with the page's script run: wait for it, or fail)
    page.locator('[data-testid="stSidebar"]').wait_for(state="hidden", timeout=30_000)
    # widgets mount after their code loads (grey placeholders until then): a key pressed before
    # the Next button exists has no shortcut to trigger, as for a person who pressed it too early
    page.get_by_role("button", name="Next").wait_for(state="visible")
    seen = [header(page)]
    shot(page, "tour_present_01")
    for i in range(2, 8):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "h => document.querySelector('[data-testid=\"stHeading\"] h2')?.innerText !== h", arg=seen[-1], timeout=SLOW
        )
        wait_idle(page)
        seen.append(header(page))
        shot(page, f"tour_present_{i:02d}")
    assert len(set(seen)) == len(seen)
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(
        "h => document.querySelector('[data-testid=\"stHeading\"] h2')?.innerText === h", arg=seen[-2], timeout=SLOW
    )
    assert "step=" in page.url and "present=1" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0
    ctx.close()


def test_normal_page_on_a_tall_window(browser, app_url):
    ctx = context(browser, viewport={"width": 1400, "height": 2000})
    page = ctx.new_page()
    page.set_default_timeout(SLOW)
    for step in ("softmax", "norm", "sampling"):
        page.goto(f"{app_url}/tour?step={step}")
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        if step in ("softmax", "sampling"):  # steps with a chart: wait until plotly has drawn its bars
            page.wait_for_selector('[data-testid="stPlotlyChart"] .js-plotly-plot .bars path', timeout=60_000)
        shot(page, f"tour_normal_{step}")
    ctx.close()


def test_the_check_fits_a_phone(browser, app_url):
    ctx = context(
        browser, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    page = ctx.new_page()
    page.set_default_timeout(SLOW)
    page.goto(f"{app_url}/tour?step=logits")
    wait_idle(page)
    shot(page, "tour_phone_logits")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1, f"the page is {width}px wide on a 390px phone"
    form = page.locator('[data-testid="stForm"]')
    assert form.count() == 1 and form.bounding_box()["width"] <= 390  # the check fits the phone
    assert "most likely next token" in form.inner_text()
    ctx.close()
