"""The attention sink folded (GraphSettings.fold_sink, the default): position 0's features are no
feature nodes; each layer's error node at position 0 becomes a "sink" node holding them. Checked
against the same graph built without folding (every row computed): the folded graph's edges from a
sink node are exactly the unfolded graph's edges from that layer's position-0 features plus its
error there, every other edge and each node's pre-activation (= the real model's) is unchanged."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.files import graph_file, load_graph_json
from tfm.analysis.graph.prune import prune_graph
from tfm.analysis.graph.view import node_name
from tfm.analysis.dictionaries.transcoder import random_transcoders
from tfm.text.token_view import token_labels

from tests.test_graph import assert_exact

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def pair():
    lm = tfm.load("default")
    ts = random_transcoders(lm.config, 256, 12, seed=1)
    ids = lm.tokenizer.prompt_ids(PROMPT)
    return (
        lm,
        ts,
        ids,
        attribution_graph(lm, ids, ts),
        attribution_graph(lm, ids, ts, settings=GraphSettings(fold_sink=False)),
    )


def test_folded_graph_is_exact_and_has_no_feature_at_position_0(pair):
    lm, ts, ids, g, whole = pair
    assert g.sink and not whole.sink
    assert int((whole.features[:, 1] == 0).sum()) > 0 and not bool((g.features[:, 1] == 0).any())
    assert g.n_features == g.n_active == int((whole.features[:, 1] > 0).sum())
    assert_exact(lm, ts, ids, g)
    kinds = [g.node(g.error_start + layer * g.n_pos + p)["kind"] for layer in range(g.n_layer) for p in (0, 1)]
    assert kinds == ["sink", "error"] * g.n_layer
    assert {whole.node(whole.error_start)["kind"]} == {"error"}


def test_sink_columns_hold_what_was_folded(pair):
    _, _, _, g, whole = pair
    rows = [int(i) for i in (whole.features[:, 1] > 0).nonzero().squeeze(1)] + [whole.n_features]
    assert whole.features[rows[:-1]].equal(g.features)
    w = whole.edges[rows].double()  # the same row nodes, unfolded
    torch.testing.assert_close(g.pre(), whole.pre()[rows], rtol=1e-5, atol=1e-4)
    t = g.n_pos
    for layer in range(g.n_layer):
        at0 = ((whole.features[:, 0] == layer) & (whole.features[:, 1] == 0)).nonzero().squeeze(1)
        want = w[:, at0].sum(1) + w[:, whole.error_start + layer * t]
        torch.testing.assert_close(g.edges[:, g.error_start + layer * t].double(), want, rtol=1e-4, atol=1e-5)
        # the other errors of this layer and the tokens: unchanged
        torch.testing.assert_close(
            g.edges[:, g.error_start + layer * t + 1 : g.error_start + (layer + 1) * t].double(),
            w[:, whole.error_start + layer * t + 1 : whole.error_start + (layer + 1) * t],
            rtol=1e-4,
            atol=1e-5,
        )
    kept = torch.tensor(rows[:-1])
    torch.testing.assert_close(g.edges[:, : g.n_features].double(), w[:, kept], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g.edges[:, g.token_start :].double(), w[:, whole.token_start :], rtol=1e-4, atol=1e-5)


def test_sink_nodes_are_named_and_round_trip(pair):
    lm, ts, ids, g, _ = pair
    labels = token_labels(lm.tokenizer, ids)
    assert node_name(g, g.error_start + 2 * g.n_pos, labels) == f"sink L2 at “{labels[0]}”"
    assert node_name(g, g.error_start + 2 * g.n_pos + 1, labels).startswith("error L2")
    gf = graph_file(prune_graph(g, 1.0, 1.0), labels, lm.config, ts)
    sinks = [n for n in load_graph_json(gf.to_json()).nodes if n.kind == "sink"]
    assert sinks and all(n.pos == 0 for n in sinks)


def test_one_token_prompts_keep_position_0_and_the_setting_is_checked(pair):
    lm, ts, ids, _, _ = pair
    g = attribution_graph(lm, ids[:1], ts)
    assert not g.sink and g.n_features > 0 and bool((g.features[:, 1] == 0).all())
    with pytest.raises(ValueError, match="fold_sink is true or false"):
        GraphSettings(fold_sink=1)
