"""The Attribution graph page on the bundled model: what it shows equals the engine's own numbers
(the graph, a node's edges, an intervention, the JSON export), and each hostile input gives one
clear box. The bundled model's trained set is used once it ships (assets/transcoders/default);
until then a random set of its shape written to a temporary folder (exactness does not depend on
training)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import tfm
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import GraphSettings, Target, attribution_graph
from tfm.analysis.graph.edit import FeatureEdit, intervene, predicted_change
from tfm.analysis.graph.files import graph_file
from tfm.analysis.graph.prune import prune_graph
from tfm.analysis.dictionaries.transcoder import (
    TranscoderConfig,
    load_transcoders,
    random_transcoders,
    save_layer,
    write_card,
)
from tfm.text.token_view import token_labels

from tests.app.conftest import as_shown
from tests.app.matrix import open_cell

PROMPT = "The cat sat on the mat. The cat"
SETTINGS = GraphSettings(max_tokens=64)  # the page's


def write_random_set(folder, cfg, n_features=128, k=6, d_model=None):
    model_cfg = cfg if d_model is None else SimpleNamespace(d_model=d_model, n_layer=cfg.n_layer)
    ts = random_transcoders(model_cfg, n_features, k, seed=3)
    folder.mkdir(parents=True)
    for tc in ts.layers:
        save_layer(tc, folder)
    write_card(folder, TranscoderConfig(model_cfg.d_model, model_cfg.n_layer, n_features, k, "random"), {})
    return folder


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default")


@pytest.fixture
def root(tmp_path, monkeypatch, lm):
    """The transcoder root the page reads: the shipped one when the bundled model has its set."""
    if graph_view.shipped_folder("default") is None:
        write_random_set(tmp_path / "default", lm.config)
        monkeypatch.setattr(graph_view, "TRANSCODER_ROOT", tmp_path)
    return graph_view.TRANSCODER_ROOT


def engine(lm, target=Target(), node=0.8, edge=0.98):
    ts = load_transcoders(graph_view.shipped_folder("default"), lm)
    ids = lm.tokenizer.prompt_ids(PROMPT)
    g = attribution_graph(lm, ids, ts, target, SETTINGS)
    return ts, g, prune_graph(g, node, edge)


def open_page(page: str, prompt: str):
    """The page opened from a link carrying the prompt: one run (no graph of another prompt first)."""
    return open_cell(page, None, params={"prompt": prompt})


def feature_nodes(gf) -> list[int]:
    return [n.id for n in sorted(gf.nodes, key=lambda n: -n.influence) if n.kind == "feature"]


def boxes(at) -> list[str]:
    return [as_shown(b.value) for b in [*at.error, *at.warning]]


def test_the_page_draws_the_engines_graph_and_a_node_shows_its_edges(root, lm):
    ts, g, pruned = engine(lm)
    at = open_page("attribution_graph", PROMPT)
    assert not at.exception and not boxes(at), boxes(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Replacement score"] == f"{pruned.replacement:.3f}"
    assert metrics["Completeness score"] == f"{pruned.completeness:.3f}"
    gf = graph_file(pruned, token_labels(lm.tokenizer, g.ids), lm.config, ts)
    drawn = {
        n for t in at.get("plotly_chart") for d in json.loads(t.proto.spec)["data"] for n in (d.get("customdata") or [])
    }
    assert drawn == {n.id for n in gf.nodes}
    features = feature_nodes(gf)
    node = features[min(2, len(features) - 1)]
    at.selectbox(key="graph.node").set_value(node).run()
    edit = [FeatureEdit(*g.features[node].tolist(), value=0.0)]
    said = (
        f"predicted change: direct edges {predicted_change(g, edit, 'direct'):+.3f} · "
        f"all edges {predicted_change(g, edit, 'total'):+.3f} · "
        f"slopes {predicted_change(g, edit, 'first_order'):+.3f}"
    )
    assert any(said in c.value for c in at.caption), [c.value for c in at.caption]
    ins, outs = (t.value for t in at.dataframe)  # inputs, then outputs
    row = g.edges[int((g.row_nodes() == node).nonzero()[0, 0])]
    want_in = torch.argsort(-row.abs())[: len(ins)]
    assert ins["id"].tolist() == want_in.tolist()
    torch.testing.assert_close(
        torch.tensor(ins["weight"].tolist(), dtype=torch.float64), row[want_in].double(), rtol=1e-5, atol=1e-9
    )
    col = g.edges[:, node]
    want_out = torch.argsort(-col.abs())[: len(outs)]
    assert outs["id"].tolist() == g.row_nodes()[want_out].tolist()
    torch.testing.assert_close(
        torch.tensor(outs["weight"].tolist(), dtype=torch.float64), col[want_out].double(), rtol=1e-5, atol=1e-9
    )


def test_switching_features_off_shows_the_engines_intervention(root, lm):
    ts, g, pruned = engine(lm)
    at = open_page("attribution_graph", PROMPT)
    chosen = [int(i) for i in (pruned.influence[: g.n_features]).topk(2).indices if pruned.nodes[int(i)]][:2]
    at.multiselect(key="graph.edit_nodes").set_value(chosen).run()
    edits = [FeatureEdit(*g.features[i].tolist(), value=0.0) for i in chosen]
    want = intervene(lm, g.ids, ts, g.target, edits, graph=g)
    metrics = [(m.label, m.value) for m in at.metric][-6:]
    assert [v for _, v in metrics] == [
        f"{want.prob_before:.4f}",
        f"{want.prob_after:.4f}",
        f"{want.logit_before:.3f}",
        f"{want.logit_after:.3f}",
        f"{want.predicted_after:.3f}",
        f"{want.predicted_first_order:.3f}",
    ], metrics
    assert [label for label, _ in metrics[-2:]] == ["Predicted by direct edges", "Predicted by slopes"]
    assert any(
        "Predicted by all edges (" in c.value and f"): {want.predicted_total:.3f}" in c.value for c in at.caption
    )
    assert want.logit_after != want.logit_before  # the features did something


def test_the_download_is_the_engines_graph_file(root, lm, downloads):
    captured = downloads
    at = open_page("attribution_graph", PROMPT)
    at.slider(key="graph.node_threshold").set_value(0.9).run()
    assert not at.exception and not boxes(at), boxes(at)
    ts, g, pruned = engine(lm, node=0.9)
    data = captured["graph.download"]
    data = data() if callable(data) else data
    got, want = (
        json.loads(data),
        json.loads(graph_file(pruned, token_labels(lm.tokenizer, g.ids), lm.config, ts).to_json()),
    )
    # edges are listed strongest first: equal weights may swap places between two computations
    got["edges"], want["edges"] = ({f"{s}-{t}": w for s, t, w in d["edges"]} for d in (got, want))
    assert_close_json(got, want)


def assert_close_json(got, want, path="$"):
    """Equal structure, text and integers; floats to 1e-5 relative: the page's graph and the test's
    are two computations, and float32 BLAS sums can differ in the last bits between them (kernels.py)."""
    number = (int, float)
    assert type(got) is type(want) or isinstance(got, number) and isinstance(want, number), (path, got, want)
    if isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for k in want:
            assert_close_json(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (a, b) in enumerate(zip(got, want)):
            assert_close_json(a, b, f"{path}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7), path
    else:
        assert got == want, path


def test_a_typed_target_and_a_logit_difference(root, lm):
    at = open_page("attribution_graph", PROMPT)
    at.radio(key="graph.target_kind").set_value("difference").run()
    at.text_input(key="graph.token").set_value(" sat").run()
    assert not boxes(at) and "the one to compare it with" in at.info[0].value  # not an error: not typed yet
    at.text_input(key="graph.versus").set_value(" cat").run()
    assert not at.exception and not boxes(at), boxes(at)
    words = lm.tokenizer.encode
    _, g, pruned = engine(lm, Target("difference", *words(" sat"), *words(" cat")))
    assert {m.label: m.value for m in at.metric}["Target logit difference"] == f"{g.logit:.3f}"


def test_hostile_inputs_give_one_clear_box_each(root, lm, tmp_path, monkeypatch):
    at = open_page("attribution_graph", "word " * 2000)  # over the page's 64 tokens
    assert not at.exception
    assert len(boxes(at)) == 1 and "at most 64" in boxes(at)[0], boxes(at)
    at = open_page("attribution_graph", PROMPT)
    at.radio(key="graph.target_kind").set_value("token").run()
    at.text_input(key="graph.token").set_value(" catapult mat").run()  # not one token
    assert not at.exception
    assert len(boxes(at)) == 1 and "not one token" in boxes(at)[0], boxes(at)
    wrong = tmp_path / "wrong"  # a set 64 wide for a 192-wide model
    write_random_set(wrong / "default", lm.config, d_model=64)
    monkeypatch.setattr(graph_view, "TRANSCODER_ROOT", wrong)
    at = open_page("attribution_graph", PROMPT)
    assert not at.exception
    assert len(boxes(at)) == 1 and "for a model 64 wide" in boxes(at)[0], boxes(at)


def test_supernodes_are_drawn_as_named_boxes(root, lm):
    ts, g, pruned = engine(lm)
    at = open_page("attribution_graph", PROMPT)
    options = feature_nodes(graph_file(pruned, token_labels(lm.tokenizer, g.ids), lm.config, ts))
    at.multiselect(key="graph.group_nodes").set_value(options[:2])
    at.text_input(key="graph.group_name").set_value("<b>**say cat**</b>")
    at.button(key="graph.group_add").click().run()
    assert not at.exception and not boxes(at), boxes(at)
    layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    assert [s["type"] for s in layout["shapes"]].count("rect") == 1
    assert any("&lt;b&gt;**say cat**&lt;/b&gt;" in a["text"] for a in layout["annotations"])
    assert any("\\*\\*say cat\\*\\*" in m.value for m in at.markdown)  # escaped where Markdown renders it


def test_a_model_without_a_set_gets_one_info(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_view, "TRANSCODER_ROOT", tmp_path)  # nothing shipped
    at = open_page("attribution_graph", PROMPT)
    assert not at.exception and not boxes(at), boxes(at)
    assert len(at.info) == 1 and "python -m tfm.train.transcoders" in at.info[0].value


def test_active_features_beside_kept_and_lowering_the_threshold_keeps_chosen_features(root, lm):
    """'Features kept' counts the graph's feature rows; how many are active in the prompt is shown
    beside it. A feature chosen for an intervention stays chosen (and its result shown) when a lower
    node threshold stops drawing it."""
    ts, g, pruned = engine(lm)
    at = open_page("attribution_graph", PROMPT)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Active features"] == f"{g.n_active:,}"
    assert metrics["Features kept"] == f"{int(pruned.nodes[: g.n_features].sum()):,} / {g.n_features:,}"
    assert metrics["Edges kept"] == f"{pruned.n_edges:,}"
    low = prune_graph(g, 0.5, 0.98)
    hidden = [i for i in pruned.nodes[: g.n_features].nonzero().squeeze(1).tolist() if not low.nodes[i]]
    assert hidden
    at.multiselect(key="graph.edit_nodes").set_value([hidden[0]]).run()
    at.slider(key="graph.node_threshold").set_value(0.5).run()
    assert not at.exception and not boxes(at), boxes(at)
    assert at.multiselect(key="graph.edit_nodes").value == [hidden[0]]
    assert any("not drawn at this node threshold" in c.value for c in at.caption)
    want = intervene(lm, g.ids, ts, g.target, [FeatureEdit(*g.features[hidden[0]].tolist(), value=0.0)], graph=g)
    assert [m.value for m in at.metric][-3] == f"{want.logit_after:.3f}"
