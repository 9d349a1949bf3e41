"""Attribution graph page in a real browser, on the bundled model and its shipped transcoders: the
nodes the browser drew are the engine's pruned graph, and clicking a feature node opens it (the
node picker and its details follow the click)."""

from __future__ import annotations

from urllib.parse import quote

import tfm
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.prune import prune_graph
from tfm.analysis.dictionaries.transcoder import load_transcoders
from tfm.text.token_view import token_labels

from tests.e2e.conftest import shot, wait_drawn, wait_idle, wait_rerun, watch_rerun

PROMPT = "The cat sat on the mat. The cat"


def test_clicking_a_feature_node_opens_it_then_both_thresholds_at_one_draw_a_capped_view(page, app_url):
    """One session: the drawn nodes, a click on a feature node, then both sliders at 1.0."""
    page.set_viewport_size({"width": 1400, "height": 1600})
    page.goto(f"{app_url}/attribution_graph?prompt={quote(PROMPT)}")
    wait_idle(page)
    wait_drawn(page)
    clicking_a_feature_node_opens_it(page)
    both_thresholds_at_one_draw_a_capped_view(page)


def clicking_a_feature_node_opens_it(page) -> None:
    lm = tfm.load("default")
    g = attribution_graph(
        lm,
        lm.tokenizer.prompt_ids(PROMPT),
        load_transcoders(graph_view.shipped_folder("default"), lm),
        settings=GraphSettings(max_tokens=64),
    )
    kept = set(prune_graph(g).nodes.nonzero().squeeze(1).tolist())
    plot = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').first
    page.wait_for_function("el => !!el._fullData?.length", arg=plot.element_handle())
    drawn = plot.evaluate("el => el._fullData.flatMap(d => d.customdata ? Array.from(d.customdata) : [])")
    assert set(drawn) == kept
    target = plot.evaluate("""el => { const t = el._fullData.find(d => d.name === 'feature');
        const i = t.x.length - 1, xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis;
        const r = el.querySelector('.nsewdrag').getBoundingClientRect();
        return {id: t.customdata[i], x: r.left + xa.l2p(t.x[i]), y: r.top + ya.l2p(t.y[i])}; }""")
    name = graph_view.node_name(g, target["id"], token_labels(lm.tokenizer, g.ids))
    opened = page.get_by_text(f"{name} · activation")
    assert opened.count() == 0  # the page opened another feature first
    watch_rerun(page)
    page.mouse.click(target["x"], target["y"])
    wait_rerun(page)
    opened.wait_for(timeout=30_000)  # its details, from the click alone
    picker = page.locator('[data-testid="stMain"] [data-testid="stSelectbox"] input').first
    assert (
        name
        in (picker.get_attribute("aria-label") or "")
        + (picker.input_value() or "")
        + page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').first.inner_html()
    )  # the picker follows
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, "attribution_graph_click")


def both_thresholds_at_one_draw_a_capped_view(page) -> None:
    """Issue #51: both sliders at 1.0 by keyboard (End); the page comes back with the view capped
    and says so, beside the metrics (Active features among them), with no exception."""
    names = (
        "Keep the nodes holding this share of the influence",
        "Keep the edges holding this share of the edge scores",
    )
    for name in names:
        watch_rerun(page)
        thumb = page.get_by_role("slider", name=name)
        thumb.focus()
        thumb.press("End")
        wait_rerun(page)
        wait_idle(page)
    page.get_by_text("keeps the strongest").wait_for(timeout=60_000)
    assert page.get_by_text("Active features").count() == 1
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, "attribution_graph_at_one")
