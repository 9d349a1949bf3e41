"""Issue #29 in a real browser: a hostile link's value is echoed in the app's own message boxes as
literal text. The DOM holds no link or image made from it, and the text shows as typed."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.conftest import shot, wait_idle

LINK = "[Log in again](https://example.com/login)"
IMAGE = "![x](http://host.example/pixel.png)"
CASES = {  # screenshot name: (page, query)
    "hostile_seed_link": ("tokens", {"seed": LINK}),
    "hostile_layer_image": ("attention", {"layer": IMAGE}),
    "hostile_why_token": ("why", {"token": LINK + "<img src=x>", "clean": "x" * 50_000}),
    "hostile_model_path": ("tokens", {"model": "path:" + IMAGE}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_link_is_plain_text_in_the_page(page, app_url, name):
    where, query = CASES[name]
    page.set_viewport_size({"width": 1400, "height": 3000})
    page.goto(f"{app_url}/{where}?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items()))
    wait_idle(page)
    shot(page, name)
    assert page.locator('[data-testid="stException"]').count() == 0
    alerts = page.locator('[data-testid="stAlert"]')
    assert alerts.count() >= 1, "the value is refused with a message"
    text = " ".join(alerts.all_inner_texts())
    assert "example.com" in text or "host.example" in text, text[:300]  # shown, as typed
    for selector in (
        'a[href*="example.com"]',
        'a[href*="host.example"]',
        'img[src*="host.example"]',
        '[data-testid="stAlert"] a',
        '[data-testid="stAlert"] img',
    ):
        assert page.locator(selector).count() == 0, (selector, text[:300])
    assert max(len(t) for t in alerts.all_inner_texts()) < 1_000
