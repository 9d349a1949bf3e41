"""The example buttons in real Chromium: the Attention page's "Try: …" button puts the repeated
sequence in the sidebar and draws its induction head, whose drawn pattern scores what the button
said. Screenshots: screenshots/examples_attention_before.png, examples_attention_after.png."""

from __future__ import annotations

import numpy as np
from playwright.sync_api import expect

import tfm
from tfm.teach import examples as X

from tests.e2e.conftest import shot, wait_drawn, wait_idle, wait_rerun, watch_rerun


def drawn_z(page, title: str):
    return page.evaluate(
        """t => { for (const el of document.querySelectorAll('.js-plotly-plot')) {
        const name = el.querySelector('.gtitle');
        if (name && name.textContent.startsWith(t)) return el._fullData[0].z.map(r => Array.from(r)); }
        return null; }""",
        title,
    )


def test_attention_example_button(page, app_url):
    lm = tfm.load("default", device="cpu")
    ex = X.for_page(lm, "attention").examples[0]
    page.goto(f"{app_url}/attention")
    wait_idle(page)
    wait_drawn(page)
    button = page.get_by_role("button", name=f"Try: {ex.label}")
    # right after goto the app can look idle before its first run has drawn anything (a CI run
    # counted no button there): wait for the button itself
    expect(button).to_have_count(1, timeout=60_000)
    shot(page, "examples_attention_before")
    watch_rerun(page)
    button.click()
    wait_rerun(page)
    wait_drawn(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stSidebar"] textarea').input_value() == ex.prompt
    title = f"Layer {ex.settings['layer']}, head {ex.settings['head']}"
    z = np.array(drawn_z(page, title), dtype=float)
    ids = lm.tokenizer.prompt_ids(ex.prompt)
    rows = [(q, [j + 1 for j in range(q) if ids[j] == ids[q]]) for q in range(len(ids))]
    assert abs(np.mean([np.nansum(z[q, keys]) for q, keys in rows if keys]) - ex.score) < 1e-5
    shot(page, "examples_attention_after")
