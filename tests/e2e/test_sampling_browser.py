"""Next-token, generation and logit-lens pages in real Chromium: what the browser draws equals
the engine's numbers, sliders move the chart, text streams in and Stop stops it."""

from __future__ import annotations

import numpy as np
import torch
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

import tfm
from tfm.analysis.lens.logit import logit_lens
from tfm.generation.sampling import breakdown
from ui import models, sidebar

from tests.e2e.conftest import shot, slide_to, wait_rerun, watch_rerun
from tests.e2e.conftest import wait_idle as _wait_idle

PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'
PROMPT = sidebar.DEFAULT_PROMPT
SLOW = 240_000  # ms: the CI machine may be shared with training jobs


def wait_idle(page) -> None:
    _wait_idle(page, SLOW)


def model():
    return models.load_lm(models.default_model_spec(), "cpu")


def prompt_logits() -> torch.Tensor:
    lm = model()
    with torch.inference_mode():
        return lm.model(torch.tensor([lm.tokenizer.encode(PROMPT)]), trace=True).logits[0, -1].float()


def chart(page, title: str):
    return page.locator(PLOT).filter(has=page.locator(".gtitle", has_text=title)).first


def expect_title(page, title: str) -> None:
    expect(chart(page, title)).to_be_visible(timeout=SLOW)
    wait_idle(page)


def open_page(page, app_url: str, link: str, heading: str) -> None:
    """Start at the home page and follow the sidebar link, as a user would (a direct first
    request for a page is covered by test_routing_browser.py)."""
    page.goto(app_url)
    wait_idle(page)
    follow(page, link, heading)


def follow(page, link: str, heading: str) -> None:
    """The sidebar link to another page, in the same session (no new page load)."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
    wait_idle(page)


def drawn_status(page) -> dict[int, str]:
    """Token id -> the status trace it is drawn in, read from plotly's own _fullData."""
    traces = chart(page, "Next-token probabilities").evaluate(
        "el => el._fullData.map(t => ({meta: t.meta, ids: t.customdata ? Array.from(t.customdata) : []}))"
    )
    return {int(i): t["meta"] for t in traces if t["meta"] in ("kept", "top_k", "top_p", "greedy") for i in t["ids"]}


def press(page, name: str, key: str, times: int) -> None:
    slider = page.get_by_role("slider", name=name)
    slider.focus()
    watch_rerun(page)
    for _ in range(times):
        page.keyboard.press(key)
    wait_rerun(page)
    wait_idle(page)


def check_statuses(page, t: float, k: int, p: float) -> dict[int, str]:
    bd = breakdown(prompt_logits(), t, k, p)
    drawn = drawn_status(page)
    assert len(drawn) == 20
    for tid, status in drawn.items():
        assert (status == "kept") == bool(bd.kept[tid]), (t, k, p, tid, status)
    return drawn


def test_next_token_sliders_redraw_the_chart_then_the_logit_lens(page, app_url):
    """One session: the Next-token page's sliders, then the Logit lens page by its sidebar link."""
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 1400, "height": 1300})
    open_page(page, app_url, "Next-token sampling", "Next-token sampling")
    expect_title(page, "T = 1 · top-k off · top-p 1")
    check_statuses(page, 1.0, 0, 1.0)
    slide_to(page, "Temperature", "ArrowLeft", "0.1", timeout=SLOW)  # keyboard, as a user without a mouse would
    expect_title(page, "T = 0.1 ·")
    slide_to(
        page, "Top-p (1 = off)", "PageDown", "0.50", timeout=SLOW
    )  # a tenth of the range per press: 5, not 50 arrows
    expect_title(page, "top-p 0.5")
    drawn = check_statuses(page, 0.1, 0, 0.5)
    assert set(drawn.values()) == {"kept", "top_p"}
    shot(page, "next_token_t0.1_p0.5")
    press(page, "Temperature", "Home", 1)
    expect_title(page, "T = 0 (greedy)")
    drawn = check_statuses(page, 0.0, 0, 0.5)
    assert list(drawn.values()).count("kept") == 1
    expect(page.get_by_text("means greedy decoding")).to_be_visible()
    shot(page, "next_token_greedy")
    page.set_viewport_size({"width": 1400, "height": 900})
    follow(page, "Logit lens", "Logit lens")
    logit_lens_draws_the_engine_values(page)


def set_new_tokens(page, n: int) -> None:
    set_number(page, "New tokens", n)


def set_number(page, label: str, n: int) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(str(n))
    box.press("Enter")
    # the rerun may start late under load: a click sent before it would race the page's redraw
    try:
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="running"]', timeout=3000)
    except PlaywrightTimeout:
        pass  # already over
    wait_idle(page)


def switch_off(page, name: str) -> None:
    """Click a switch's label (the label takes the click) until the switch shows off. In two CI
    runs, never locally, the first click left it on: a click lost to the page's redraw, so it is
    tried again (at most 3 times; a switch that always springs back still fails here)."""
    switch = page.get_by_role("switch", name=name)
    for _ in range(3):
        wait_idle(page)
        page.locator("label", has=switch).click()
        try:
            expect(switch).not_to_be_checked(timeout=10_000)
            break
        except AssertionError:
            shot(page, f"switch_{name.replace(' ', '_')}_still_on")
    expect(switch).not_to_be_checked()
    wait_idle(page)


def test_generate_shows_text_timeline_comparison_and_cache_speed_and_stop_keeps_the_tokens_made(page, app_url):
    """One session on the Generation page: 12 tokens with the KV cache, their timeline, the
    comparison and the cache's speed-up; then a long run without the cache, stopped."""
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 1400, "height": 3000})  # Streamlit scrolls inside: tall enough for the timeline
    open_page(page, app_url, "Generation & timeline", "Generation & timeline")
    generated_with_timeline_comparison_and_cache_speed(page)
    page.set_viewport_size({"width": 1400, "height": 1500})
    stop_keeps_the_tokens_made(page)


def generated_with_timeline_comparison_and_cache_speed(page) -> None:
    assert page.get_by_role("switch", name="KV cache").is_checked()
    set_new_tokens(page, 12)
    page.get_by_role("button", name="Generate").click()
    expect_title(page, "Step 0: the distribution")
    steps = list(tfm.generate(model(), PROMPT, 12, 0.8, 0, 1.0, seed=0, trace=True))
    text = page.locator(".gen-text").first.inner_text()
    assert text == PROMPT + steps[-1].text_so_far
    assert page.locator(".gen-text span[title]").count() == 12
    expect(page.locator("p", has_text="tokens/s").first).to_contain_text("KV cache on")
    shot(page, "generate_text")

    press(page, "Generated token", "ArrowRight", 3)
    expect_title(page, "Step 3: where the last position")
    z = chart(page, "Step 3: where the last position").evaluate(
        "el => Array.from(el._fullData[0].z, r => Array.from(r))"
    )
    rows = torch.stack([steps[3].trace[f"blocks.{i}.attn.pattern"][0, :, -1, :] for i in range(model().config.n_layer)])
    np.testing.assert_allclose(np.array(z), rows.reshape(-1, rows.shape[-1]).numpy(), rtol=1e-5, atol=1e-7)
    lens = chart(page, "Step 3: logit lens").evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))")
    np.testing.assert_allclose(
        np.array(lens), logit_lens(model().model, steps[3].trace).top_probs[:, -1].numpy(), rtol=1e-5, atol=1e-7
    )
    shot(page, "generate_timeline")

    page.get_by_role("button", name="Compare").click()
    expect_title(page, "Tokens really in play")
    assert page.locator(".gen-text").count() == 3
    shot(page, "generate_compare")
    page.get_by_role("button", name="Time this generation with and without the cache").click()
    expect(page.get_by_text("Speed-up")).to_be_visible(timeout=SLOW)
    wait_idle(page)
    shot(page, "generate_cache")


def stop_keeps_the_tokens_made(page) -> None:
    """Tokens stream in while the script runs; Stop interrupts it between two steps."""
    set_new_tokens(page, 231)  # the cap for this prompt; 4 samples without the KV cache: a run of seconds
    set_number(page, "Samples", 4)
    switch_off(page, "KV cache")
    wait_idle(page)
    page.get_by_role("button", name="Generate").click()
    spans = page.locator(".gen-text").first.locator("span[title]")
    page.wait_for_function(  # this run's text: the last generation's is drawn again (or stale) until replaced
        """() => { const t = document.querySelector('.gen-text');
        const running = document.querySelector('[data-testid="stApp"]').dataset.testScriptState === 'running';
        return running && t && !t.closest('[data-stale="true"]') && t.querySelectorAll('span[title]').length >= 4; }""",
        timeout=SLOW,
    )
    assert page.locator('[data-testid="stApp"][data-test-script-state="running"]').count() == 1
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_text("Generation was stopped early")).to_be_visible(timeout=SLOW)
    wait_idle(page)
    n = spans.count()
    assert 4 <= n < 231
    titles = spans.evaluate_all("els => els.map(e => e.title)")
    made = tfm.generate(model(), PROMPT, n, 0.8, 0, 1.0, seed=0)
    assert [t.rsplit(": p = ", 1)[0] for t in titles] == [s.display for s in made]
    shot(page, "generate_stopped")


def logit_lens_draws_the_engine_values(page) -> None:
    expect_title(page, "Logit lens")
    z = chart(page, "Logit lens").evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))")
    lm = model()
    with torch.inference_mode():
        trace = lm.model(torch.tensor([lm.tokenizer.encode(PROMPT)]), trace=True).trace
    want = logit_lens(lm.model, trace).top_probs[:, :, 0].numpy()
    np.testing.assert_allclose(np.array(z), want, rtol=1e-5, atol=1e-7)
    shot(page, "logit_lens")
