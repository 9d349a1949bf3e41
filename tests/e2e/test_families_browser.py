"""A GQA + partial-rotary + parallel-block model opened by a shared link in real Chromium: the
Positions page draws only the rotated pairs (equal to the engine's angles), the Shapes page
counts KV heads, and the sidebar shows the new fields. Screenshots for a human to look at."""

from __future__ import annotations

import math
from urllib.parse import quote

import numpy as np
from playwright.sync_api import expect

from tfm.core.config import ModelConfig
from tfm.core.model import rope_angles
from ui import models

from tests.e2e.conftest import shot, wait_drawn, wait_idle

PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'
CFG = ModelConfig.preset(
    "tiny",
    d_model=32,
    n_head=4,
    n_kv_head=2,
    pos_encoding="rope",
    rotary_pct=0.5,
    parallel_block=True,
    norm="rmsnorm",
    activation="swiglu",
    bias=False,
    qkv_bias=True,
)


def open_link(page, url: str, path: str, heading: str) -> None:
    page.set_viewport_size({"width": 1400, "height": 2600})
    page.goto(f"{url}/{path}?model={quote(models.random_spec(CFG, 0))}")
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=180_000)
    wait_idle(page, timeout=180_000)
    wait_drawn(page)


def test_positions_page_draws_the_rotated_pairs_and_shapes_and_sidebar_show_kv_heads(page, app_url):
    """The link opens the Positions page; the Shapes page follows by its sidebar link, same session."""
    open_link(page, app_url, "positions", "Positional encodings")
    positions_page_draws_the_rotated_pairs(page)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Shapes & parameters", exact=True).click()
    expect(page.get_by_role("heading", name="Shapes & parameters", exact=True)).to_be_visible(timeout=180_000)
    wait_idle(page, timeout=180_000)
    wait_drawn(page)
    shapes_page_and_sidebar_show_kv_heads(page)


def positions_page_draws_the_rotated_pairs(page) -> None:
    plot = page.locator(PLOT).filter(has=page.locator(".gtitle", has_text="RoPE rotation angle")).first
    z = np.array(plot.evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))"), dtype=np.float64)
    lm = models.load_lm(models.random_spec(CFG, 0), "cpu")
    angles = rope_angles(lm.model.inv_freq, 0, CFG.context_length).numpy()
    assert z.shape == (CFG.context_length, 2)
    np.testing.assert_allclose(z, np.mod(angles, 2 * math.pi), atol=1e-5)
    expect(page.get_by_text("first 4 of each head's 8 dimensions")).to_be_visible()
    shot(page, "families_positions")


def shapes_page_and_sidebar_show_kv_heads(page) -> None:
    sidebar = page.get_by_test_id("stSidebar")
    for label in ("n_kv_head", "rotary pct", "parallel block (GPT-NeoX)", "q/k/v bias (Qwen2)"):
        expect(sidebar.get_by_text(label, exact=True).first).to_be_visible()
    expect(page.get_by_text("4 query heads share 2 key/value heads")).to_be_visible()
    shot(page, "families_shapes")
