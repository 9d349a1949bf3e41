"""tfm.analysis.positions, tfm.analysis.norms, tfm.analysis.shapes: the permutation check, the LayerNorm worked example, depth_norms, position
helpers, shape traces, parameter formulas and KV-cache sizes, each against an independent
computation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tfm.analysis import norms, shapes
from tfm.analysis import positions
from tfm.analysis import param_counts
from tfm.core.kv_cache import KVCache
from tfm.core.config import ModelConfig
from tfm.core.model import GPT, rope_angles, sinusoidal_table

IDS = torch.randint(0, 257, (17,), generator=torch.Generator().manual_seed(3))


def small(**kw) -> ModelConfig:
    return ModelConfig.preset("tiny", context_length=64, d_model=32, n_head=4, d_ff=64, **kw)


# ---- permutation check -------------------------------------------------------------------


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
def test_attention_without_positions_is_permutation_equivariant_and_with_them_is_not(pos, make_model):
    model = make_model(small(pos_encoding=pos))
    res = positions.permutation_check(model, IDS.tolist(), seed=1)
    assert sorted(res.perm) == list(range(17)) and res.perm != list(range(17))
    assert res.perm_prefix[-1] == 16 and res.perm_prefix[:-1] != list(range(16))
    assert res.scale > 0.1
    assert res.full_without < 1e-6 * max(1.0, res.scale)
    assert res.causal_last_without < 1e-6 * max(1.0, res.scale)
    if pos == "none":
        assert res.full_with is None and res.causal_last_with is None
    else:
        assert res.full_with > 1e-2 * res.scale
        assert res.causal_last_with > 1e-3 * res.scale


@pytest.mark.parametrize(
    "pos,placement", list(itertools.product(["learned", "sinusoidal", "rope", "none"], ["pre", "post"]))
)
def test_block0_attention_is_the_models_own_attention(pos, placement, make_model):
    """In causal mode, on the model's embedded input, it reproduces the trace's attn_out."""
    model = make_model(small(pos_encoding=pos, norm_placement=placement))
    with torch.no_grad():
        tr = model(IDS[None], trace=True).trace
        angles = tr["rope.angles"] if pos == "rope" else None
        mine = positions.block0_attention(model, tr["blocks.0.resid_pre"], angles, causal=True)
    torch.testing.assert_close(mine, tr["blocks.0.attn_out"], atol=1e-5, rtol=0)


def test_permutation_check_rejects_a_single_token(make_model):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        positions.permutation_check(make_model(small()), [5], 0)


# ---- LayerNorm worked example ------------------------------------------------------------


@pytest.mark.parametrize(
    "norm,placement,which",
    [
        (n, p, w)
        for n in ("layernorm", "rmsnorm")
        for p in ("pre", "post")
        for w in ("ln1", "ln2", "ln_final")
        if not (p == "post" and w == "ln_final")
    ],
)
def test_worked_example_matches_torch_norm_functions(norm, placement, which, make_model):
    model = make_model(small(norm=norm, norm_placement=placement))
    with torch.no_grad():
        tr = model(IDS[None], trace=True).trace
    ex = norms.layernorm_worked_example(model, tr, 1, 9, which)
    name = "ln_final" if which == "ln_final" else f"blocks.1.{which}"
    mod = model.ln_final if which == "ln_final" else getattr(model.blocks[1], which)
    x = tr[f"{name}.input"][0, 9]
    if norm == "layernorm":
        ref = F.layer_norm(x, x.shape, mod.weight, mod.bias, mod.eps)
        assert ex.mean == pytest.approx(float(x.double().mean()), abs=1e-9)
        assert ex.var == pytest.approx(float(x.double().var(unbiased=False)), rel=1e-9)
    else:
        ref = F.rms_norm(x, x.shape, mod.weight, mod.eps)
        assert ex.rms == pytest.approx(float((x.double() ** 2).mean().add(mod.eps).sqrt()), rel=1e-9)
    assert ex.max_abs_diff <= 1e-6
    assert torch.allclose(ex.output.float(), ref.detach(), atol=1e-5)
    assert torch.allclose(ex.output.float(), tr[f"{name}.output"][0, 9], atol=1e-5)
    assert ex.trace_diff < 1e-4
    assert torch.equal(ex.x, x.double())


def test_worked_example_rejects_bad_choices(make_model):
    model = make_model(small(norm_placement="post"))
    tr = model(IDS[None], trace=True).trace
    with pytest.raises(ValueError, match="no final norm"):
        norms.layernorm_worked_example(model, tr, 0, 0, "ln_final")
    with pytest.raises(ValueError, match="layer 5"):
        norms.layernorm_worked_example(model, tr, 5, 0, "ln1")
    with pytest.raises(ValueError, match="token 17"):
        norms.layernorm_worked_example(model, tr, 0, 17, "ln1")


# ---- depth_norms ------------------------------------------------------------------------


def test_depth_norms_shapes_values_and_gradients_match_autograd():
    cfg = small(n_layer=6)
    res = norms.depth_norms(cfg, IDS.tolist(), seed=4)
    assert isinstance(res, norms.DepthNorms)
    assert res.resid_norm.shape == (7,) and res.grad_norm.shape == (6,)
    assert torch.isfinite(res.resid_norm).all() and torch.isfinite(res.grad_norm).all()
    assert (res.grad_norm > 0).all()
    assert abs(res.loss - math.log(cfg.vocab_size)) < 1.0  # a fresh model guesses nearly uniformly
    # Independent: the same fresh model, plain forward, torch.autograd.grad per block.
    model = GPT(cfg)
    model.reset_parameters(torch.Generator().manual_seed(4))
    logits = model(IDS[None]).logits[0]
    loss = F.cross_entropy(logits[:-1], IDS[1:])
    assert res.loss == pytest.approx(float(loss.detach()), rel=1e-5)
    for i, block in enumerate(model.blocks):
        grads = torch.autograd.grad(loss, list(block.parameters()), retain_graph=True)
        assert float(res.grad_norm[i]) == pytest.approx(float(torch.sqrt(sum((g**2).sum() for g in grads))), rel=1e-4)
    emb = (model.tok_emb(IDS) + model.pos_emb.weight[:17]).detach()
    assert float(res.resid_norm[0]) == pytest.approx(float(emb.norm(dim=-1).mean()), rel=1e-5)


def test_depth_norms_is_reproducible_by_seed_and_accepts_tensors():
    cfg = small(n_layer=3)
    a, b = norms.depth_norms(cfg, IDS, seed=1), norms.depth_norms(cfg, IDS.tolist(), seed=1)
    assert torch.equal(a.resid_norm, b.resid_norm) and torch.equal(a.grad_norm, b.grad_norm)
    c = norms.depth_norms(cfg, IDS, seed=2)
    assert not torch.equal(a.grad_norm, c.grad_norm)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        norms.depth_norms(cfg, [3], 0)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_pre_norm_stream_grows_while_post_norm_stream_is_reset_each_block(norm):
    d = 128  # wide enough that each sublayer adds a visible amount at init
    pre = norms.depth_norms(small(n_layer=12, norm=norm, norm_placement="pre").replace(d_model=d, d_ff=4 * d), IDS, 0)
    post = norms.depth_norms(small(n_layer=12, norm=norm, norm_placement="post").replace(d_model=d, d_ff=4 * d), IDS, 0)
    # post-norm: every block ends with a norm (gain 1, bias 0 at init): each token has norm ~ sqrt(d)
    assert torch.allclose(post.resid_norm[1:], torch.full((12,), math.sqrt(d)), rtol=1e-2)
    # pre-norm: nothing rescales the sum, it keeps growing and stays far below sqrt(d) at init
    assert (pre.resid_norm[1:] > pre.resid_norm[:-1]).all()
    assert pre.resid_norm[-1] > 1.5 * pre.resid_norm[0]
    assert pre.resid_norm[-1] < 0.5 * math.sqrt(d)
    assert torch.equal(pre.resid_norm[0], post.resid_norm[0])  # same embedding, same seed
    assert not torch.allclose(pre.grad_norm, post.grad_norm, rtol=0.1)


# ---- positions helpers -------------------------------------------------------------------


def test_sinusoidal_dot_products_depend_only_on_offset():
    res = positions.sinusoidal_dots(100, 64, [0, 10, 40])
    assert res.k.tolist() == list(range(60))
    table = sinusoidal_table(100, 64).double()
    for p, dots in res.dots.items():
        assert torch.allclose(dots, torch.stack([table[p] @ table[p + k] for k in range(60)]), atol=1e-9)
        assert torch.allclose(dots, res.formula, atol=1e-4)  # table is float32
    assert res.formula[0] == pytest.approx(32.0)  # sum of cos 0 over 32 pairs


def test_doubling_dims_and_bits():
    dims, periods = positions.doubling_dims(128, 6)
    assert dims[0] == 0 and all(d % 2 == 0 for d in dims)
    ratios = [b / a for a, b in zip(periods, periods[1:])]
    assert all(1.5 < r < 2.7 for r in ratios)
    bits = positions.binary_bits(8, 3)
    assert bits.tolist()[5] == [1, 0, 1] and bits[:, 0].tolist() == [0, 1] * 4


def test_position_helpers_read_the_models_tensors(make_model):
    learned = make_model(small(pos_encoding="learned"))
    assert torch.equal(positions.position_vectors(learned, 10), learned.pos_emb.weight[:10].detach())
    sin = make_model(small(pos_encoding="sinusoidal"))
    assert torch.equal(positions.position_vectors(sin), sin.pos_table)
    rope = make_model(small(pos_encoding="rope"))
    assert positions.position_vectors(rope) is None
    assert torch.equal(positions.rope_angle_table(rope, 20), rope_angles(rope.inv_freq, 0, 20))
    table = torch.randn(30, 8, generator=torch.Generator().manual_seed(0))
    sim = positions.cosine_similarity_matrix(table)
    assert torch.allclose(sim, F.cosine_similarity(table[:, None], table[None], dim=-1), atol=1e-6)


def test_pca_of_planar_points_recovers_their_plane():
    g = torch.Generator().manual_seed(0)
    plane = torch.randn(2, 6, generator=g)
    coeffs = torch.randn(40, 2, generator=g) * torch.tensor([3.0, 1.0])
    coords, share = positions.pca_2d(coeffs @ plane + 5.0)
    assert float(share.sum()) == pytest.approx(1.0, abs=1e-6) and share[0] > share[1]
    # distances between points are preserved by the projection when the data is 2-D
    flat = (coeffs @ plane).double()
    assert torch.allclose(torch.cdist(coords.double(), coords.double()), torch.cdist(flat, flat), atol=1e-4)


# ---- shapes, parameters, KV cache ---------------------------------------------------------


@pytest.mark.parametrize(
    "pos,act", [("learned", "gelu"), ("rope", "swiglu"), ("sinusoidal", "relu"), ("none", "gelu_tanh")]
)
def test_meta_shape_trace_equals_a_real_run(pos, act, make_model):
    cfg = small(pos_encoding=pos, activation=act)
    model = make_model(cfg)
    tokens = shapes.tile_tokens(IDS, 3, 40)
    assert tokens.shape == (3, 40) and torch.equal(tokens[2, 17:34], IDS) and torch.equal(tokens[0], tokens[2])
    with torch.no_grad():
        real = model(tokens, trace=True).trace.shapes
    assert shapes.shape_trace(cfg, IDS, 3, 40) == real
    with pytest.raises(ValueError, match="context length"):
        shapes.shape_trace(cfg, IDS, 1, 65)


@pytest.mark.parametrize(
    "variant",
    list(
        itertools.product(
            ["learned", "rope"],
            ["layernorm", "rmsnorm"],
            ["pre", "post"],
            ["gelu", "swiglu"],
            [True, False],
            [True, False],
        )
    ),
)
def test_param_formulas_equal_the_real_counts(variant):
    pos, norm, placement, act, bias, tied = variant
    cfg = small(pos_encoding=pos, norm=norm, norm_placement=placement, activation=act, bias=bias, tied_embeddings=tied)
    counts = param_counts(GPT(cfg))
    assert {k: v for k, (_, v) in shapes.param_formulas(cfg).items()} == counts


@pytest.mark.parametrize(
    "extra",
    [
        dict(head_dim=12, qk_norm=True),
        dict(n_kv_head=2, head_dim=6, qkv_bias=True),
        dict(n_kv_head=1, head_dim=16, qk_norm=True, post_norms=True, activation="geglu"),
    ],
)
def test_param_formulas_equal_the_real_counts_with_gemma_and_qwen3_fields(extra):
    cfg = small(pos_encoding="rope", norm="rmsnorm", bias=False, **extra)
    assert {k: v for k, (_, v) in shapes.param_formulas(cfg).items()} == param_counts(GPT(cfg))


def test_kv_cache_with_windows_counts_local_layers_up_to_their_window():
    cfg = small(
        pos_encoding="rope", n_layer=6, n_kv_head=1, head_dim=16, sliding_window=10, local_layers=(0, 1, 2, 3, 4)
    )
    per_position = 2 * 1 * 16 * 4  # K and V, one head of 16, float32
    assert shapes.kv_window_bytes(cfg, 50, torch.float32) == per_position * (1 * 50 + 5 * 10)
    assert (
        shapes.kv_window_bytes(cfg, 8, torch.float32)
        == per_position * 6 * 8
        == shapes.kv_cache_bytes(cfg, 8, torch.float32).formula
    )  # shorter than the window: nothing to drop


def test_gpt2_parameter_formula_total_is_124m():
    total = sum(v for _, v in shapes.param_formulas(ModelConfig.preset("gpt2")).values())
    assert total == 124_439_808  # GPT-2 small, tied embeddings


def test_kv_cache_bytes_formula_and_kvcache_agree():
    cfg = small()
    res = shapes.kv_cache_bytes(cfg, 50, torch.float16, batch=3)
    assert res.formula == 2 * 2 * 4 * 8 * 50 * 3 * 2
    assert res.nbytes == KVCache(cfg, batch=3, max_len=50, dtype=torch.float16).nbytes() == res.formula
    assert shapes.kv_cache_bytes(ModelConfig.preset("gpt2"), 1024, torch.float32).formula == 2 * 12 * 768 * 1024 * 4
    with pytest.raises(ValueError, match="context"):
        shapes.kv_cache_bytes(cfg, 65, torch.float32)


def test_depth_norms_hold_a_chunk_of_logit_rows_and_equal_the_whole(monkeypatch):
    """Gemma 3's 262,144-token vocabulary: the depth check's loss never holds (T, V) logits, only
    `LOGIT_CHUNK_BYTES` of rows at a time (3 rows here: the old code's full forward held 17), and its
    numbers equal those of one chunk of every row (the test above: equal to autograd on the full logits)."""
    from tests.logit_rows import WidestLogits
    from tfm.core import encoder

    cfg = small(n_layer=3)
    whole = norms.depth_norms(cfg, IDS, seed=5)
    monkeypatch.setattr(encoder, "LOGIT_CHUNK_BYTES", 3 * 4 * cfg.vocab_size)
    norms.depth_norms(cfg, IDS, seed=5)  # (tfm.core.kernels times a new product shape on 8 rows, once)
    with WidestLogits(cfg.vocab_size) as seen:
        chunked = norms.depth_norms(cfg, IDS, seed=5)
    assert 1 <= seen.rows <= 3
    assert chunked.loss == pytest.approx(whole.loss, rel=1e-6)
    torch.testing.assert_close(chunked.grad_norm, whole.grad_norm, rtol=1e-5, atol=0)
    assert torch.equal(chunked.resid_norm, whole.resid_norm)
