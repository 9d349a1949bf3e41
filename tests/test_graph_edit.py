"""Interventions on an attribution graph's features (tfm.analysis.graph.edit): they equal a
recomputation with the model's own edits and leave the model untouched; the graph's prediction
equals the frozen linear model's; building a graph reports progress and stops when asked; the
faithfulness check pairs predictions with real effects."""

from __future__ import annotations

import pytest
import torch

from tfm.analysis.graph import frozen as graph_frozen
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.edit import FeatureEdit, edited_logits, intervene, predicted_change
from tfm.analysis.graph.prune import prune_graph
from tfm.core.edits import Patch

from tests.test_graph import bundled  # noqa: F401 (the module's fixture: the bundled model and a graph)

pytestmark = pytest.mark.usefixtures("one_thread")


def _recomputed(lm, ts, ids, edits):
    """Oracle: each edited block in turn, the model's own forward with Patch edits of the blocks
    below, its ln2 output read, the block's mlp_out patched with (new - actual) W_dec."""
    patches = []
    with torch.no_grad():
        for e in sorted(edits, key=lambda e: e.layer):
            tr = lm.model(torch.tensor([ids]), trace=True, edits=patches).trace
            acts = ts.layers[e.layer].encode(tr[f"blocks.{e.layer}.ln2.output"][0])
            out = tr[f"blocks.{e.layer}.mlp_out"][0].clone()
            out[e.pos] += (e.value - acts[e.pos, e.feature]) * ts.layers[e.layer].W_dec[e.feature]
            patches.append(Patch(f"blocks.{e.layer}.mlp_out", out))
        return lm.model(torch.tensor([ids]), edits=patches).logits[0, -1]


def test_intervention_matches_a_recomputation_and_leaves_the_model(bundled):  # noqa: F811 (the fixture)
    lm, ts, ids, g = bundled
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    (l0, p0, f0), (l1, p1, f1) = g.features[0].tolist(), g.features[-1].tolist()
    edits = [FeatureEdit(l0, p0, f0, 0.0), FeatureEdit(l1, p1, f1, 2.5), FeatureEdit(l1, 0, 3, 1.0)]
    got = edited_logits(lm, ids, ts, edits)
    torch.testing.assert_close(got, _recomputed(lm, ts, ids, edits), rtol=1e-5, atol=1e-4)
    assert all(torch.equal(v, lm.model.state_dict()[k]) for k, v in before.items())
    plain = lm.model(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(edited_logits(lm, ids, ts, []), plain)
    r = intervene(lm, ids, ts, g.target, edits[:2], graph=g)
    assert r.logit_before == pytest.approx(g.logit, rel=1e-6) and r.logit_after != r.logit_before
    assert r.predicted_after is not None and r.predicted_total is not None and 0 <= r.prob_after <= 1
    i0, i1 = 0, g.n_features - 1
    first = -float(g.slopes[i0] * g.activations[i0]) + float(g.slopes[i1] * (2.5 - g.activations[i1]))
    assert r.predicted_first_order == pytest.approx(r.logit_before + first, rel=1e-9)
    with pytest.raises(ValueError, match="not a node of this graph"):
        intervene(lm, ids, ts, g.target, [FeatureEdit(l1, 0, 3, 1.0)], graph=g)
    with pytest.raises(ValueError, match="out of range"):
        edited_logits(lm, ids, ts, [FeatureEdit(0, len(ids), 0)])


def test_prediction_equals_the_frozen_linear_model(bundled):  # noqa: F811 (the fixture)
    """Oracle: the frozen model run again with the edited activations, every other graph feature
    following its pre-activation linearly (block by block), errors held: the target's change."""
    lm, ts, ids, g = bundled
    with torch.no_grad():
        tr = lm.model(torch.tensor([ids]), trace=True).trace
    fz = graph_frozen.freeze(lm.model, tr, ts, torch.float64)
    u = lm.model.unembed.weight[g.target.token].detach().double()
    base = [tr[f"blocks.{i}.mlp_out"][0].double() - ts.layers[i].b_dec.double() for i in range(lm.config.n_layer)]
    stream0 = (tr["embed"][0] + tr["pos_embed"]).double()
    m0, logit0 = graph_frozen.forward(fz, stream0, base, u)
    i_edit = int(torch.argmax(g.edges[-1, : g.n_features].abs()))
    l_e, p_e, f_e = g.features[i_edit].tolist()
    writes = [w.clone() for w in base]
    for _ in range(lm.config.n_layer + 1):  # settles block by block
        m, _ = graph_frozen.forward(fz, stream0, writes, u)
        writes = [w.clone() for w in base]
        for j, (l, p, f) in enumerate(g.features.tolist()):
            pre = m[l, p] @ fz.layers[l].w_enc[:, f] + fz.layers[l].b_enc[f]
            new = 0.0 if j == i_edit else pre
            writes[l][p] += (new - float(g.activations[j])) * fz.layers[l].w_dec[f]
    _, logit = graph_frozen.forward(fz, stream0, writes, u)
    want = float(logit[-1] - logit0[-1])
    assert predicted_change(g, [FeatureEdit(l_e, p_e, f_e, 0.0)], "total") == pytest.approx(want, rel=1e-4, abs=1e-6)
    # the direct prediction: the feature's own edge into the target, scaled to the change (-1 x: off)
    assert predicted_change(g, [FeatureEdit(l_e, p_e, f_e, 0.0)]) == pytest.approx(
        -float(g.edges[-1, i_edit]), rel=1e-6
    )


def test_progress_and_stopping(bundled):  # noqa: F811 (the fixture)
    lm, ts, ids, _ = bundled
    seen = []
    g = attribution_graph(lm, ids, ts, progress=lambda f, text: seen.append(f))
    assert seen and seen[-1] == 1.0 and seen == sorted(seen) and g.n_features == g.n_active
    seen.clear()
    attribution_graph(
        lm, ids, ts, settings=GraphSettings(max_feature_nodes=100), progress=lambda f, text: seen.append(f)
    )
    assert seen[-1] == 1.0
    from tfm.core.cancel import Cancelled

    asked = []
    with pytest.raises(Cancelled):
        attribution_graph(lm, ids, ts, should_stop=lambda: asked.append(1) or len(asked) > 1)
    assert len(asked) == 2


def test_faithfulness_pairs_predictions_with_real_effects(bundled):  # noqa: F811 (the fixture)
    from tfm.analysis.graph.edit import faithfulness

    lm, ts, ids, g = bundled
    p = prune_graph(g)
    f = faithfulness(lm, ids, ts, g, p.influence, n=4)
    assert f.features.shape == (4, 3) and -1 <= f.spearman <= 1
    for (l, pos, feat), pred, meas in zip(f.features.tolist(), f.predicted, f.measured):
        r = intervene(lm, ids, ts, g.target, [FeatureEdit(l, pos, feat, 0.0)], graph=g)
        assert float(meas) == pytest.approx(r.logit_after - r.logit_before, abs=1e-9)
        assert float(pred) == pytest.approx(r.predicted_after - r.logit_before, abs=1e-9)
