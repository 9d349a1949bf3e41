"""The typed results pages read (issue #52): norms.Summaries and its panels, norm_parameters,
positions.position_table / rope_table / sinusoid_demo, shapes.param_rows / kv_what_if,
attribution.top_token, Attribution.strongest_head and patching.estimate_vs_ablation, each
against an independent computation on a small model."""

from __future__ import annotations

import pytest
import torch

from tfm.analysis import attribution, norms, patching, positions, shapes
from tfm.core.config import ModelConfig

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = [3, 17, 200, 5, 99, 17, 200, 41]


def small(**kw) -> ModelConfig:
    return ModelConfig.preset("tiny", context_length=64, d_model=32, n_head=4, d_ff=64, **kw)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_summaries_are_the_trace_s_norms_and_panels_name_what_the_trace_holds(make_model, norm):
    model = make_model(small(norm=norm))
    tr = model(torch.tensor([IDS]), trace=True).trace
    got = norms.summaries(tr)
    resid = torch.stack(
        [tr[f"blocks.{i}.resid_pre"][0].norm(dim=-1) for i in range(model.config.n_layer)]
        + [tr[f"blocks.{model.config.n_layer - 1}.resid_post"][0].norm(dim=-1)]
    )
    torch.testing.assert_close(got.resid, resid)
    torch.testing.assert_close(got.attn_out[1], tr["blocks.1.attn_out"][0].norm(dim=-1))
    x = tr["blocks.0.resid_pre"][0]
    inputs = ["ln1.input_mean", "ln1.input_std"] if norm == "layernorm" else ["ln1.input_rms"]  # RMSNorm: no mean
    panels = {p.name: p for p in got.panels("ln1", norm)}
    assert list(panels) == [*inputs, "ln1.output_mean", "ln1.output_std"]
    assert [p.side for p in panels.values()] == ["input"] * len(inputs) + ["output", "output"]
    scale = panels[inputs[-1]].values[0]
    expected = x.std(-1, unbiased=False) if norm == "layernorm" else x.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(scale, expected, rtol=1e-4, atol=1e-5)
    if norm == "layernorm":
        torch.testing.assert_close(panels["ln1.input_mean"].values[0], x.mean(-1))


def test_norm_parameters_are_the_modules_own(make_model):
    model = make_model(small(norm="layernorm", bias=True))
    got = {p.kind: p for p in norms.norm_parameters(model, 1, "ln2")}
    assert set(got) == {"weight", "bias"}
    torch.testing.assert_close(got["bias"].chosen, model.blocks[1].ln2.bias.detach().float())
    assert got["weight"].labels == ("0.ln1", "0.ln2", "1.ln1", "1.ln2", "final")
    torch.testing.assert_close(got["weight"].every[-1], model.ln_final.weight.detach().float())
    rms = make_model(small(norm="rmsnorm", bias=False))
    assert [p.kind for p in norms.norm_parameters(rms, 0, "ln_final")] == ["weight"]
    assert norms.norm_choices(rms) == ("ln1", "ln2", "ln_final")


def test_position_and_rope_tables(make_model):
    model = make_model(small(pos_encoding="learned"))
    got = positions.position_table(model, 10)
    table = model.pos_emb.weight[:10].detach().float()
    torch.testing.assert_close(got.table, table)
    unit = table / table.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(got.similarity, unit @ unit.T, rtol=1e-4, atol=1e-5)
    assert got.pca is not None and got.pca[0].shape == (10, 2)
    assert positions.position_table(model, 2).pca is None
    rope = make_model(small(pos_encoding="rope"))
    found = positions.rope_table(rope, 12)
    torch.testing.assert_close(found.angles, torch.arange(12.0)[:, None] * rope.inv_freq.float()[None, :])


def test_sinusoid_demo_is_the_formula():
    demo = positions.sinusoid_demo(20, 8)
    p, i = torch.arange(20.0)[:, None], torch.arange(0, 8, 2, dtype=torch.float64)
    torch.testing.assert_close(demo.table[:, 0::2].double(), torch.sin(p / 10000 ** (i / 8)), rtol=1e-5, atol=1e-6)
    assert demo.clock_bits.shape[0] == 20 and demo.clock_table.shape == (20, 8)


def test_param_rows_add_up_and_kv_what_if_is_the_formula(make_model):
    model = make_model(small(n_kv_head=2))
    rows = shapes.param_rows(model)
    assert rows[-1].component == "total" and rows[-1].counted == model.num_params()
    assert sum(r.counted for r in rows[:-1]) == model.num_params() and all(r.match for r in rows)
    cfg = model.config
    got = shapes.kv_what_if(cfg, 100, 3, 1, "bfloat16", 2)
    assert got.size.formula == 2 * 3 * 1 * cfg.d_head * 100 * 2 * 2 and got.size.nbytes == got.size.formula
    assert got.window_bytes is None
    same = shapes.kv_what_if(cfg, 50, cfg.n_layer, cfg.n_kv_head, "float32", 1)
    assert same.size == shapes.kv_cache_bytes(cfg, 50, torch.float32, 1)
    with pytest.raises(ValueError):
        shapes.kv_what_if(cfg, 50, 0, 1, "float32", 1)


def test_top_token_strongest_head_and_estimate_vs_ablation(make_model):
    model = make_model(small())
    out = model(torch.tensor([IDS]), trace=True)
    assert attribution.top_token(model, out.trace, 4) == int(out.logits[0, 4].argmax())
    attr = attribution.direct(model, IDS, position=4)
    best = max(((l, h) for l in range(2) for h in range(4)), key=lambda p: abs(float(attr.heads[p])))
    assert attr.strongest_head() == best
    sweep = patching.ablation_sweep(model, IDS, patching.Metric(4, attr.token))
    both = patching.estimate_vs_ablation(attr, sweep)
    assert both.estimate == tuple(attr.value(name) for name in both.names)
    assert both.names[-1] == "blocks.1.mlp" and len(both.effect) == 2 * 4 + 2
    assert both.effect[5] == pytest.approx(float(sweep.heads[1, 1] - sweep.base))
    assert both.effect[-1] == pytest.approx(float(sweep.mlps[1] - sweep.base))
