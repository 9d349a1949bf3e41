"""Positional encodings, LayerNorm & residual stream, Shapes & parameters in real Chromium:
the drawn numbers equal the engine's, and screenshots for a human to look at."""

from __future__ import annotations

import numpy as np
import torch
from playwright.sync_api import expect

from tfm.analysis import norm_stats
from ui import models, sidebar

from tests.e2e.conftest import shot, wait_drawn, wait_idle

PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'


def engine():
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(sidebar.DEFAULT_PROMPT)[-lm.config.context_length :]
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    return lm, ids, trace


def open_page(page, link: str, heading: str, height: int, last_title: str) -> None:
    """Follow the sidebar link and wait for the page's last chart (the script may still be
    starting when the heading shows)."""
    page.set_viewport_size({"width": 1400, "height": height})  # Streamlit scrolls inside: tall shows all
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=120_000)
    expect(page.locator(".gtitle", has_text=last_title).first).to_be_visible(timeout=300_000)
    wait_idle(page, timeout=180_000)
    wait_drawn(page)


def drawn_z(page, title: str) -> np.ndarray:
    plot = page.locator(PLOT).filter(has=page.locator(".gtitle", has_text=title)).first
    z = plot.evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))")
    return np.array(z, dtype=np.float64)


def test_positions_norms_and_shapes_pages(page, app_url):
    """One session from the app's root (app.py sets up the navigation), each page by its sidebar link."""
    lm, ids, trace = engine()
    page.goto(app_url)
    wait_idle(page, timeout=180_000)
    positions_page(page, lm)
    norms_page(page, trace)
    shapes_page(page, lm, trace)


def positions_page(page, lm) -> None:
    open_page(page, "Positional encodings", "Positional encodings", 3500, "binary clock")
    table = (lm.model.pos_emb.weight if lm.model.pos_emb is not None else lm.model.pos_table).detach()
    n = min(128, lm.config.context_length)
    np.testing.assert_array_equal(drawn_z(page, "Positional vectors"), table[:n].double().numpy())
    expect(page.get_by_text("full attention (no mask)", exact=False).first).to_be_attached()
    assert page.locator(".gtitle", has_text="binary clock").count() == 1
    shot(page, "positions")


def norms_page(page, trace) -> None:
    open_page(page, "LayerNorm & residual stream", "LayerNorm & the residual stream", 4500, "Gradient norm per block")
    stats = norm_stats(trace)
    np.testing.assert_allclose(drawn_z(page, "ln1.input_std"), stats["ln1.input_std"].double().numpy(), rtol=1e-5)
    expect(page.get_by_text("≤ 1e-6", exact=False).first).to_be_visible()
    shot(page, "norms")


def shapes_page(page, lm, trace) -> None:
    open_page(page, "Shapes & parameters", "Shapes & parameters", 3200, "Parameters by component")
    svg = page.locator('[data-testid="stGraphVizChart"] svg').first
    expect(svg).to_be_visible(timeout=30_000)
    drawn = svg.text_content()
    for s in trace.shapes:
        if not s.name.startswith("blocks.") or s.name.startswith("blocks.0."):
            assert " × ".join(f"{a}={n}" for a, n in zip(s.axes, s.shape)) in drawn, s.name
    expect(page.get_by_text(f"{lm.model.num_params():,} parameters", exact=False).first).to_be_attached()
    shot(page, "shapes")
