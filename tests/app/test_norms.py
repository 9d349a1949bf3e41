"""LayerNorm & residual-stream page: heatmaps, worked example and depth curves equal the engine's numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfm.analysis import norms as tfm_norms
from tfm.analysis import norm_stats, residual_norms
from ui import models

from tests.app.variants import ACTIVATIONS, NORMS, PLACEMENTS, POSITIONS, variants
from tests.app.conftest import chart_by_title, charts, decode, open_page, use_random

PROMPT = "The cat sat on the mat. The cat sat on the"


def engine(at):
    """The page's model (the same cached object), its prompt ids and a trace computed here."""
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.encode(at.session_state["sidebar.prompt"])[-lm.config.context_length :]
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    return lm, ids, trace


def test_norm_statistics_and_residual_charts_equal_the_engine():
    at = open_page("norms", PROMPT)
    lm, ids, trace = engine(at)
    stats = norm_stats(trace)
    for norm in ("ln1", "ln2"):
        at.radio(key="norms.stat_norm").set_value(norm).run()
        assert not at.exception
        shown = [k for k in stats if k.startswith(norm) and not k.endswith("input_norm")]
        for key in shown:
            fig = chart_by_title(at, f"{key}:")
            np.testing.assert_allclose(decode(fig["data"][0]["z"]), stats[key].numpy(), rtol=1e-5, atol=1e-7)
            assert fig["data"][0]["y"] == [f"block {i}" for i in range(lm.config.n_layer)]
    res = residual_norms(trace)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "Residual-stream L2 norm per token")["data"][0]["z"]), res["resid"].numpy(), rtol=1e-5
    )
    growth = chart_by_title(at, "across layers")["data"]
    np.testing.assert_allclose(decode(growth[0]["y"]), res["resid"].mean(1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(decode(growth[1]["y"]), res["resid"].max(1).values.numpy(), rtol=1e-5)
    bars = chart_by_title(at, "What each sublayer adds")["data"]
    np.testing.assert_allclose(decode(bars[0]["y"]), res["attn_out"].mean(1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(decode(bars[1]["y"]), res["mlp_out"].mean(1).numpy(), rtol=1e-5)


def test_worked_example_matches_layer_norm_on_the_page():
    at = open_page("norms", PROMPT)
    lm, ids, trace = engine(at)
    at.selectbox(key="norms.which").set_value("ln2")
    at.slider(key="norms.layer").set_value(3)
    at.selectbox(key="norms.token").set_value(4).run()
    assert not at.exception
    mod = lm.model.blocks[3].ln2
    x = trace["blocks.3.ln2.input"][0, 4].double()
    ref = F.layer_norm(x, x.shape, mod.weight.double(), mod.bias.double(), mod.eps).detach()
    table = at.dataframe[0].value
    np.testing.assert_array_equal(table["x"].to_numpy(), x.numpy())
    np.testing.assert_allclose(table["output"].to_numpy(), ref.numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(table["F.layer_norm"].to_numpy(), ref.numpy(), atol=1e-12, rtol=0)
    ok = [s.value for s in at.success]
    assert len(ok) == 1 and "≤ 1e-6" in ok[0]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["mean"] == f"{float(x.mean()):.5f}"
    assert float(metrics["max |ours − F.layer_norm|"]) <= 1e-6
    np.testing.assert_array_equal(
        decode(chart_by_title(at, "Gain of block 3 ln2")["data"][0]["x"]), mod.weight.detach().double().numpy()
    )
    boxes = chart_by_title(at, "Gain of every norm")["data"]
    norms = [n for b in lm.model.blocks for n in (b.ln1, b.ln2)] + [lm.model.ln_final]
    assert len(boxes) == len(norms)
    for box, n in zip(boxes, norms):
        np.testing.assert_array_equal(decode(box["y"]), n.weight.detach().double().numpy())


def test_depth_comparison_curves_are_depth_norms():
    at = open_page("norms", PROMPT)
    lm, ids, _ = engine(at)
    at.slider(key="norms.cmp_layers").set_value(12)
    at.radio(key="norms.cmp_norm").set_value("rmsnorm").run()
    assert not at.exception
    resid = chart_by_title(at, "Activation norm")["data"]
    grad = chart_by_title(at, "Gradient norm per block")["data"]
    assert len(resid) == len(grad) == 2
    for i, placement in enumerate(("pre", "post")):
        cfg = lm.config.replace(norm_placement=placement, norm="rmsnorm", n_layer=12)
        expected = tfm_norms.depth_norms(cfg, ids, 0)
        assert resid[i]["name"].startswith(f"{placement}-norm")
        np.testing.assert_allclose(decode(resid[i]["y"]), expected.resid_norm.numpy(), rtol=1e-5)
        np.testing.assert_allclose(decode(grad[i]["y"]), expected.grad_norm.numpy(), rtol=1e-4)
    at.radio(key="norms.cmp_placement").set_value("post").run()
    assert [t["name"][:9] for t in chart_by_title(at, "Activation norm")["data"]] == ["post-norm"]


def test_rmsnorm_post_norm_model():
    at = open_page("norms", PROMPT)
    use_random(at, norm="rmsnorm", norm_placement="post", context_length=64)
    lm, ids, trace = engine(at)
    assert at.selectbox(key="norms.which").options == ["ln1", "ln2"]  # post-norm: no final norm
    stats = norm_stats(trace)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "ln1.input_rms")["data"][0]["z"]), stats["ln1.input_rms"].numpy(), rtol=1e-5
    )
    assert float({m.label: m.value for m in at.metric}["max |ours − F.rms_norm|"]) <= 1e-6
    assert not any("Bias" in str(f["layout"].get("title")) for f in charts(at))  # RMSNorm has no bias


def test_the_variants_cover_every_pair():
    rows = [(pos, *v) for pos in POSITIONS for v in variants(pos)]
    for a, b in itertools.combinations(range(4), 2):
        assert {(r[a], r[b]) for r in rows} == {
            (x[a], x[b]) for x in itertools.product(POSITIONS, NORMS, PLACEMENTS, ACTIVATIONS)
        }


@pytest.mark.slow  # 4 x 4 model variants: CI only
@pytest.mark.parametrize("pos", POSITIONS)
def test_every_pair_of_variant_settings_renders(pos):
    at = open_page("norms", PROMPT)
    use_random(at, pos_encoding=pos)
    at.slider(key="norms.cmp_layers").set_value(2).run()  # keeps the forward+backward passes quick
    for norm, placement, act in variants(pos):
        for name, value in (("norm", norm), ("norm_placement", placement), ("activation", act)):
            at.selectbox(key=f"sidebar.{name}").set_value(value)
        at.run()
        assert not at.exception, (pos, norm, placement, act, at.exception)
        assert not at.error, (pos, norm, placement, act, [e.value for e in at.error])
        assert len(at.success) == 1 and chart_by_title(at, "Gradient norm per block")


@pytest.mark.slow  # GPT-2 small's widths: the quick tier's other tests draw every chart on small models
def test_gpt2_shaped_model_renders():
    """GPT-2 small's widths (768, 12 heads) with 2 layers and a smaller vocabulary."""
    at = open_page("norms", PROMPT)
    use_random(at, preset="gpt2", n_layer=2, vocab_size=4096)
    lm, ids, trace = engine(at)
    assert lm.config.d_model == 768
    stats = norm_stats(trace)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "ln1.input_std")["data"][0]["z"]), stats["ln1.input_std"].numpy(), rtol=1e-5
    )
    assert not [f for f in charts(at) if "Gradient norm" in str(f["layout"].get("title"))]  # big: waits for the button
    at.button(key="norms.cmp_run").click().run()
    assert not at.exception, at.exception
    grad = chart_by_title(at, "Gradient norm per block")["data"]
    assert len(grad) == 2 and len(decode(grad[0]["y"])) == 12
    at.radio(key="norms.cmp_placement").set_value("pre").run()  # computed once: shown without the button
    assert len(chart_by_title(at, "Gradient norm per block")["data"]) == 1
