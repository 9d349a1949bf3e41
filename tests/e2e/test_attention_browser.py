"""The Attention page in real Chromium: what the browser draws equals the engine's tensors."""

from __future__ import annotations

import numpy as np
import torch
from playwright.sync_api import expect

from ui import models, sidebar

from tests.e2e.conftest import shot, wait_drawn, wait_idle, wait_rerun, watch_rerun

PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'
SLOW = 180_000  # ms: the shared 2-core test machine can be very busy; waits end as soon as the page is ready


def idle(page) -> None:
    wait_idle(page, timeout=SLOW)


def expected_pattern(prompt: str, layer: int, head: int) -> np.ndarray:
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)[-lm.config.context_length :]
    with torch.inference_mode():
        pat = lm.model(torch.tensor([ids]), trace=True).trace[f"blocks.{layer}.attn.pattern"][0, head].numpy()
    out = pat.astype(np.float64, copy=True)
    out[np.triu_indices(len(ids), 1)] = np.nan
    return out


def drawn_z(page) -> np.ndarray:
    plot = page.locator(PLOT).first
    z = plot.evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r, v => v === null ? NaN : v))")
    return np.array(z, dtype=np.float64)


def expect_title(page, text: str) -> None:
    """Widget changes reach the server after a short debounce: wait for the redrawn chart."""
    expect(page.locator(f"{PLOT} .gtitle").first).to_contain_text(text, timeout=SLOW)
    idle(page)


def go(page, link: str, heading: str) -> None:
    """Switch pages with the sidebar link and wait for the new page to finish."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
    idle(page)


def press(page, slider_name: str, key: str, times: int) -> None:
    slider = page.get_by_role("slider", name=slider_name)
    slider.focus()
    for _ in range(times):
        page.keyboard.press(key)
    idle(page)


def wait_table(page) -> None:
    """st.dataframe draws on a canvas a moment after the script is idle."""
    page.locator('[data-testid="stDataFrame"] canvas').first.wait_for(state="attached")
    wait_drawn(page)


def test_attention_page_draws_the_engine_values_then_the_home_button_opens_the_induction_head(page, app_url):
    """One session: home, Tokens, the Attention page's tabs and table, then Home again, whose
    button opens the model's induction head."""
    _open_home_and_tokens(page, app_url)
    _attention_page_draws_the_engine_values(page)
    go(page, "Home", "tfm: see inside a transformer")
    _home_button_opens_the_models_induction_head_on_a_repeated_sentence(page)


def _attention_page_draws_the_engine_values(page) -> None:
    go(page, "Attention", "Attention")
    expect_title(page, "Layer 0, head 0")
    _assert_draws_head(page, 0, 0)

    press(page, "Layer", "ArrowRight", 2)
    expect_title(page, "Layer 2, head 0")
    press(page, "Head", "ArrowRight", 1)
    expect_title(page, "Layer 2, head 1")
    _assert_draws_head(page, 2, 1)
    assert "layer=2" in page.url and "head=1" in page.url
    shot(page, "attention_single_head")
    _visit_the_other_tabs(page)

    # Select the row of head L1 H3 (rows are ordered by layer, then head): the single-head view opens.
    n_head = models.load_lm(models.default_model_spec(), "cpu").config.n_head
    row = 1 * n_head + 3
    box = page.locator('[data-testid="stDataFrame"]').bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 * (row + 1) + 17)
    expect_title(page, "Layer 1, head 3")
    _assert_draws_head(page, 1, 3)


def _open_home_and_tokens(page, app_url) -> None:
    """The home page, then the Tokens page's chips and table (a screenshot of each)."""
    page.set_viewport_size({"width": 1400, "height": 1700})  # Streamlit scrolls inside: a tall window shows all
    page.set_default_timeout(SLOW)
    page.goto(app_url)
    idle(page)
    shot(page, "home")
    go(page, "Tokens", "Tokens")
    expect(page.locator(".tfm-chips span").first).to_be_visible(timeout=SLOW)
    assert page.locator(".tfm-chips span").count() > 5
    wait_table(page)
    shot(page, "tokens")


def _assert_draws_head(page, layer: int, head: int) -> None:
    """The drawn heatmap is the engine's pattern of that head on the default prompt."""
    np.testing.assert_allclose(
        drawn_z(page), expected_pattern(sidebar.DEFAULT_PROMPT, layer, head), rtol=1e-5, atol=1e-7, equal_nan=True
    )


def _visit_the_other_tabs(page) -> None:
    """Every head, the head view (one chart each) and the head table (no chart), ending on the table."""
    for tab, title, name in (
        ("All heads", "Every head", "attention_model_view"),
        ("Head view", "who looks at whom", "attention_head_view"),
        ("Head table", None, "attention_head_table"),
    ):
        page.get_by_role("tab", name=tab).click()
        if title:
            expect_title(page, title)
            assert page.locator(PLOT).count() == 1
        else:
            expect(page.locator(PLOT)).to_have_count(0, timeout=SLOW)
            idle(page)
            wait_table(page)
        shot(page, name)


def test_html_prompt_is_shown_as_text(page, app_url):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    bad = "<img src=x onerror=alert(1)>"
    page.set_viewport_size({"width": 1400, "height": 1700})
    page.set_default_timeout(SLOW)
    page.goto(f"{app_url}/attention")
    idle(page)
    box = page.get_by_role("textbox", name="Prompt")
    box.fill(bad)
    watch_rerun(page)
    box.press("Control+Enter")
    wait_rerun(page, SLOW)
    page.locator(f"{PLOT} .xtick text").first.wait_for()
    ticks = page.locator(f"{PLOT} .xtick text").all_text_contents()
    assert ticks and ticks[0].startswith("<"), ticks
    assert page.locator("img[src='x']").count() == 0
    shot(page, "attention_html_prompt")
    go(page, "Tokens", "Tokens")
    expect(page.locator(".tfm-chips span").first).to_be_visible(timeout=SLOW)
    assert page.locator(".tfm-chips span").first.inner_text().startswith("<")
    assert page.locator(".tfm-chips img").count() == 0
    wait_drawn(page)  # an injected handler would have run while the page painted
    assert dialogs == [], dialogs
    shot(page, "tokens_html_prompt")


def test_long_prompt_shows_a_readable_window(page, app_url):
    from urllib.parse import quote

    prompt = " ".join(f"word{i % 37} and more text" for i in range(120))
    page.set_viewport_size({"width": 1400, "height": 1700})
    page.set_default_timeout(SLOW)
    page.goto(f"{app_url}/attention?prompt={quote(prompt)}")
    expect_title(page, "Layer 0, head 0")
    lm = models.load_lm(models.default_model_spec(), "cpu")
    t = min(len(lm.tokenizer.encode(prompt)), lm.config.context_length)
    assert t > 64
    np.testing.assert_allclose(
        drawn_z(page), expected_pattern(prompt, 0, 0)[t - 64 :, t - 64 :], rtol=1e-5, atol=1e-7, equal_nan=True
    )
    expect(page.get_by_role("slider", name="Positions shown (query and key)").first).to_be_visible()
    shot(page, "attention_long_prompt")


def _home_button_opens_the_models_induction_head_on_a_repeated_sentence(page) -> None:
    """The new user's path: the home page names the strongest induction head (measured on the
    running model) and one click shows it on a repeated sentence, drawn from the engine."""
    from tfm import analysis

    lm = models.load_lm(models.default_model_spec(), "cpu")
    with torch.inference_mode():
        probe = analysis.induction_probe(lm.model, seq_len=40, bos=lm.tokenizer.eot_id)
    layer, head, _ = analysis.top_head(probe["induction"])
    page.get_by_role("button", name=f"Show layer {layer}, head {head} on a repeated sentence").click()
    expect_title(page, f"Layer {layer}, head {head}")
    prompt = page.get_by_role("textbox", name="Prompt").input_value()
    assert prompt.count("The little dog ran") == 2
    np.testing.assert_allclose(drawn_z(page), expected_pattern(prompt, layer, head), rtol=1e-5, atol=1e-6)
    shot(page, "attention-induction-from-home")
