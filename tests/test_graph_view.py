"""tfm.analysis.graph.view: what the Attribution graph page reads beside the engine, against the
graph's dense adjacency, the tokenizer and the unembedding."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import GraphSettings, Target, attribution_graph
from tfm.analysis.graph.edit import FeatureEdit
from tfm.analysis.dictionaries.transcoder import TranscoderConfig, random_transcoders, save_layer, write_card

PROMPT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def setup():
    lm = tfm.load("default")
    ts = random_transcoders(lm.config, 96, 5, seed=1)
    g = attribution_graph(
        lm, lm.tokenizer.prompt_ids(PROMPT), ts, Target(), GraphSettings(fold_sink=False)
    )  # position 0 kept
    return lm, ts, g


def test_inputs_and_outputs_are_the_strongest_edges_of_the_adjacency(setup):
    _, _, g = setup
    a = g.adjacency().double()  # A[target, source]
    for node in (0, g.n_features // 2, g.n_features - 1, g.error_start, g.token_start, g.target_index):
        ins, outs = graph_view.node_inputs(g, node, 5), graph_view.node_outputs(g, node, 5)
        for found, weights in ((ins, a[node]), (outs, a[:, node])):
            nz = weights.nonzero().squeeze(1)
            want = nz[torch.argsort(-weights[nz].abs())][:5].tolist()
            assert [n for n, _ in found] == want
            assert [w for _, w in found] == weights[want].tolist()
    assert graph_view.node_inputs(g, g.token_start, 5) == []  # sources have no inputs
    assert graph_view.node_outputs(g, g.target_index, 5) == []  # the target feeds nothing


def test_targets_from_text(setup):
    lm, _, _ = setup
    cat, sat = lm.tokenizer.encode(" cat")[0], lm.tokenizer.encode(" sat")[0]
    assert graph_view.target_from_text(lm, "top") == Target()
    assert graph_view.target_from_text(lm, "token", " cat") == Target("token", cat)
    assert graph_view.target_from_text(lm, "difference", " cat", " sat") == Target("difference", cat, sat)
    with pytest.raises(ValueError, match="not one token"):
        graph_view.target_from_text(lm, "token", " catapult mat")
    with pytest.raises(ValueError, match="type the versus token"):
        graph_view.target_from_text(lm, "difference", " cat", "")
    with pytest.raises(ValueError, match="choose top, token or difference"):
        graph_view.target_from_text(lm, "<b>x</b>")


def test_decoder_tokens_read_the_row_through_the_final_norm_and_unembedding(setup):
    lm, ts, _ = setup
    up, up_s, down, down_s = graph_view.decoder_tokens(lm, ts, 2, 7, 4)
    d = ts.layers[2].W_dec[7] * lm.model.ln_final.weight.float()
    scores = lm.model.unembed.weight.float() @ (d - d.mean())  # LayerNorm: centred
    assert up == scores.topk(4).indices.tolist() and down == (-scores).topk(4).indices.tolist()
    torch.testing.assert_close(torch.tensor(up_s), scores.topk(4).values)


def test_feature_edits_name_each_feature_and_refuse_other_nodes(setup):
    _, _, g = setup
    edits = graph_view.feature_edits(g, [0, 3], 2.5)
    assert edits == tuple(FeatureEdit(*g.features[i].tolist(), value=2.5) for i in (0, 3))
    assert graph_view.feature_edits(g, [1], None)[0].value == 0.0
    with pytest.raises(ValueError, match="error node"):
        graph_view.feature_edits(g, [g.error_start], None)


def test_node_names(setup):
    lm, _, g = setup
    labels = [f"t{i}" for i in range(g.n_pos)]
    layer, pos, feat = g.features[0].tolist()
    assert graph_view.node_name(g, 0, labels) == f"L{layer} #{feat} at “t{pos}”"
    assert graph_view.node_name(g, g.error_start + 1, labels) == "error L0 at “t1”"
    assert graph_view.node_name(g, g.token_start + 2, labels) == "token “t2”"
    assert graph_view.node_name(g, g.target_index, labels) == "target"


def test_shipped_folder_only_for_plain_names_with_a_card(tmp_path):
    (tmp_path / "mine").mkdir()
    assert graph_view.shipped_folder("mine", tmp_path) is None  # no card
    cfg = TranscoderConfig(8, 1, 4, 2)
    save_layer(random_transcoders(cfg, 4, 2).layers[0], tmp_path / "mine")
    write_card(tmp_path / "mine", cfg, {})
    assert graph_view.shipped_folder("mine", tmp_path) == tmp_path / "mine"
    stamp = graph_view.folder_stamp(tmp_path / "mine")
    assert len(stamp) == 4
    for spec in ("../mine", "path:/x/mine", 'random:{"preset":"tiny"}', ".hidden", "", "a/b"):
        assert graph_view.shipped_folder(spec, tmp_path) is None


def test_missing_layers_of_a_set_still_training(tmp_path):
    cfg = TranscoderConfig(8, 3, 4, 2)
    ts = random_transcoders(cfg, 4, 2)
    for tc in ts.layers[:2]:
        save_layer(tc, tmp_path)
    write_card(tmp_path, cfg, {})
    assert graph_view.missing_layers(tmp_path) == [2]
    save_layer(ts.layers[2], tmp_path)
    assert graph_view.missing_layers(tmp_path) == []


def test_the_opening_node_is_at_the_last_position_else_past_the_first(setup):
    _, _, g = setup
    pos = g.features[:, 1]
    last, middle, first = (int((pos == p).nonzero()[0, 0]) for p in (g.n_pos - 1, 1, 0))
    assert graph_view.opening_node(g, [first, middle, last]) == last
    assert graph_view.opening_node(g, [first, middle]) == middle
    assert graph_view.opening_node(g, [first]) == first
    with pytest.raises(ValueError, match="lower the node threshold"):
        graph_view.opening_node(g, [])
