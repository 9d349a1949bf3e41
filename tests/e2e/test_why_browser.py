"""Why-this-token page in a real browser: the head heatmap the browser drew equals the
engine's attribution; clicking a head cell opens its source split; tabs render without errors."""

from __future__ import annotations

import numpy as np

import tfm
from tfm.analysis import attribution
from ui import models, sidebar

from tests.e2e.conftest import shot, wait_drawn, wait_idle


def test_why_page_draws_the_engines_numbers(page, app_url):
    lm = tfm.load(models.default_model_spec(), device="cpu")
    attr = attribution.direct(lm, lm.tokenizer.encode(sidebar.DEFAULT_PROMPT))
    page.set_viewport_size({"width": 1400, "height": 5000})  # tall: full-page shots show every chart
    page.goto(f"{app_url}/why")
    wait_idle(page)
    # by its title, drawn: a first run after the server starts may mount the charts one by one
    plot = page.locator(
        '[data-testid="stPlotlyChart"] .js-plotly-plot',
        has=page.locator(".gtitle", has_text="Every head's direct contribution"),
    )
    page.wait_for_function("el => !!el._fullData?.[0]?.z", arg=plot.element_handle())
    drawn = np.array(plot.evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))"))
    np.testing.assert_allclose(drawn, attr.heads.numpy(), rtol=1e-5, atol=1e-7)
    shot(page, "why_attribution")
    box = plot.locator(".nsewdrag").first.bounding_box()  # click cell L0 H0 (top-left)
    n_layer, n_head = attr.heads.shape
    page.mouse.click(box["x"] + box["width"] / (2 * n_head), box["y"] + box["height"] / (2 * n_layer))
    page.locator(".gtitle", has_text="L0 H0:").wait_for(timeout=30_000)  # the rerun may start after a first idle check
    wait_idle(page)
    assert page.locator(".gtitle", has_text="L0 H0:").count() == 1
    for name in ("Attribution vs ablation", "Intervene", "MLP neurons", "Activation patching", "Contribution graph"):
        page.get_by_role("tab", name=name).click()
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        if name == "MLP neurons":
            page.locator('[data-testid="stDataFrame"] canvas').first.wait_for()
            wait_drawn(page)
        shot(page, "why_" + name.lower().replace(" ", "_"))
