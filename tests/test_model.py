"""tfm.model and tfm.core.config: every architecture variant computes the same thing on the fused
and the explicit (traced) path and with a KV cache; inputs and configs are validated with
clear messages (test_model_checks.py); causality; reproducible initialisation; norms, RoPE and sinusoidal tables
against independent formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tfm.core.kv_cache import KVCache
from tfm.core.config import ModelConfig
from tfm.core.model import GPT, Norm, apply_rope, rope_angles, sinusoidal_table
from tfm.core.trace import Recorder

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread

POS = ("learned", "sinusoidal", "rope", "none")
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "swiglu")
CORE = list(itertools.product(POS, NORMS, PLACEMENTS, ACTIVATIONS))  # 64
FLAGS = list(itertools.product((True, False), (True, False)))  # bias x tied
ATOL = 1e-5


def variant_cfg(pos, norm, placement, act, bias=True, tied=True) -> ModelConfig:
    return ModelConfig.preset(
        "tiny", pos_encoding=pos, norm=norm, norm_placement=placement, activation=act, bias=bias, tied_embeddings=tied
    )


def variant_id(v) -> str:
    return "-".join(v)


def tokens(b: int, t: int, vocab: int = 257, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


# ---- every variant: fused == explicit == KV-cached ------------------------------------


@pytest.mark.parametrize("core", CORE, ids=variant_id)
def test_fused_and_traced_paths_give_the_same_logits(core, make_model):
    idx = tokens(2, 13)
    for bias, tied in FLAGS:
        model = make_model(variant_cfg(*core, bias=bias, tied=tied))
        with torch.no_grad():
            fused = model(idx)
            traced = model(idx, trace=True)
        assert fused.trace is None
        assert fused.logits.shape == (2, 13, 257)
        assert fused.logits.abs().max() > 0.1, "weights too small for a meaningful comparison"
        torch.testing.assert_close(
            traced.logits, fused.logits, atol=ATOL, rtol=0, msg=lambda m: f"bias={bias} tied={tied}: {m}"
        )
        assert torch.equal(traced.trace["logits"], traced.logits)


@pytest.mark.parametrize("core", CORE, ids=variant_id)
def test_kv_cache_decoding_equals_full_forward(core, make_model):
    idx = tokens(2, 12, seed=1)
    for bias, tied in FLAGS:
        model = make_model(variant_cfg(*core, bias=bias, tied=tied), seed=3)
        with torch.no_grad():
            full = model(idx).logits
            # prefill 5 tokens, then one token at a time (fused path)
            cache = KVCache(model.config, batch=2)
            steps = [model(idx[:, :5], cache=cache).logits]
            steps += [model(idx[:, i : i + 1], cache=cache).logits for i in range(5, 12)]
            assert cache.length == 12
            torch.testing.assert_close(
                torch.cat(steps, 1),
                full,
                atol=ATOL,
                rtol=0,
                msg=lambda m: f"one-at-a-time bias={bias} tied={tied}: {m}",
            )
            # prefill in uneven chunks (non-square causal mask), on both paths
            for trace in (False, True):
                cache = KVCache(model.config, batch=2, max_len=12)
                chunks, start = [], 0
                for size in (3, 4, 1, 4):
                    chunks.append(model(idx[:, start : start + size], trace=trace, cache=cache).logits)
                    start += size
                torch.testing.assert_close(
                    torch.cat(chunks, 1),
                    full,
                    atol=ATOL,
                    rtol=0,
                    msg=lambda m: f"chunks trace={trace} bias={bias} tied={tied}: {m}",
                )


@pytest.mark.parametrize("core", CORE[::7], ids=variant_id)
def test_last_only_gives_the_last_row_of_the_full_logits(core, make_model):
    idx = tokens(2, 11, seed=4)
    model = make_model(variant_cfg(*core), seed=5)
    with torch.no_grad():
        full = model(idx).logits
        for trace in (False, True):
            out = model(idx, trace=trace, last_only=True)
            assert out.logits.shape == (2, 1, 257)
            torch.testing.assert_close(out.logits, full[:, -1:], atol=ATOL, rtol=0)
            if trace:  # every position is still traced, its logits (computed when read) included
                torch.testing.assert_close(out.trace["logits"], full, atol=ATOL, rtol=0)
                assert out.trace["blocks.0.attn.pattern"].shape[-2:] == (11, 11)
        cache = KVCache(model.config, batch=2)  # prefill then one step, as generation does
        first = model(idx[:, :10], cache=cache, last_only=True).logits
        step = model(idx[:, 10:], cache=cache, last_only=True).logits
    torch.testing.assert_close(torch.cat([first, step], 1), full[:, 9:11], atol=ATOL, rtol=0)


def test_kv_cache_is_checked():
    cfg = ModelConfig.preset("tiny")
    model = GPT(cfg).eval()
    with pytest.raises(ValueError, match="between 1 and the context length 32"):
        KVCache(cfg, max_len=33)
    with pytest.raises(ValueError, match="between 1 and the context length"):
        KVCache(cfg, max_len=0)
    cache = KVCache(cfg, batch=1, max_len=4)
    model(tokens(1, 3), cache=cache)
    with pytest.raises(ValueError, match="KV cache holds 4 positions; 5 were asked for"):
        model(tokens(1, 2), cache=cache)
    with pytest.raises(ValueError, match="made for batch 1.*batch 2"):
        model(tokens(2, 1), cache=KVCache(cfg, batch=1))
    big = KVCache(cfg, batch=1)
    model(tokens(1, 30), cache=big)
    with pytest.raises(ValueError, match="33 positions exceed the context length 32"):
        model(tokens(1, 3), cache=big)
    assert KVCache(cfg, batch=2, max_len=8).nbytes() == 2 * (2 * 2 * 2 * 8 * 8) * 4


# ---- causality, initialisation -----------------------------------------------------------


@pytest.mark.parametrize("core", CORE[::3], ids=variant_id)
def test_changing_a_future_token_does_not_change_earlier_logits(core, make_model):
    model = make_model(variant_cfg(*core), seed=5)
    idx = tokens(1, 10, seed=2)
    changed = idx.clone()
    changed[0, 6] = (changed[0, 6] + 1) % 257
    with torch.no_grad():
        for trace in (False, True):
            a, b = model(idx, trace=trace).logits, model(changed, trace=trace).logits
            torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
            assert (a[:, 6:] - b[:, 6:]).abs().amax() > 1e-3, "the changed token must matter from its position on"


def test_reset_parameters_is_reproducible_and_leaves_the_global_rng_alone():
    cfg = ModelConfig.preset("tiny", n_layer=4, d_model=64, n_head=4, d_ff=256)
    a, b, c = GPT(cfg), GPT(cfg), GPT(cfg)
    rng_before = torch.get_rng_state()
    a.reset_parameters(torch.Generator().manual_seed(7))
    b.reset_parameters(torch.Generator().manual_seed(7))
    c.reset_parameters(torch.Generator().manual_seed(8))
    assert torch.equal(torch.get_rng_state(), rng_before)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.attn.qkv.weight"], sc["blocks.0.attn.qkv.weight"])
    # GPT-2 initialisation: zero biases, unit gains, N(0, 0.02), residual projections / sqrt(2 L)
    assert torch.all(sa["blocks.1.attn.qkv.bias"] == 0) and torch.all(sa["blocks.1.ln1.weight"] == 1)
    assert abs(sa["blocks.0.mlp.fc.weight"].std().item() - 0.02) < 0.002
    assert abs(sa["blocks.0.mlp.proj.weight"].std().item() - 0.02 / math.sqrt(8)) < 0.001
    assert abs(sa["blocks.0.attn.proj.weight"].std().item() - 0.02 / math.sqrt(8)) < 0.001
    assert a.unembed.weight is a.tok_emb.weight  # still tied
    d = GPT(cfg, torch.Generator().manual_seed(7))  # drawn once, in the constructor: the same weights
    assert all(torch.equal(sa[k], v) for k, v in d.state_dict().items())


def test_untied_model_has_its_own_unembedding_and_num_params_counts_tied_once():
    tied, untied = GPT(ModelConfig.preset("tiny")), GPT(ModelConfig.preset("tiny", tied_embeddings=False))
    assert tied.unembed.weight is tied.tok_emb.weight
    assert untied.unembed.weight is not untied.tok_emb.weight
    assert untied.num_params() - tied.num_params() == 257 * 16


# ---- building blocks against independent formulas ------------------------------------------


@pytest.mark.parametrize("kind, bias", [("layernorm", True), ("layernorm", False), ("rmsnorm", False)])
def test_traced_norm_equals_torch_functional(kind, bias):
    cfg = ModelConfig.preset("tiny", d_model=64, n_head=4, norm=kind, bias=bias)
    norm = Norm(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(64, generator=g))
        if norm.bias is not None:
            norm.bias.copy_(torch.randn(64, generator=g))
    x = 3.0 + 2.0 * torch.randn(2, 5, 64, generator=g)
    if kind == "layernorm":
        want = F.layer_norm(x, (64,), norm.weight, norm.bias, cfg.norm_eps)
    else:
        want = F.rms_norm(x, (64,), norm.weight, cfg.norm_eps)
    rec = Recorder()
    with torch.no_grad():
        traced, fused = norm(x, rec), norm(x)
    # outputs reach |5|: allow float32 rounding (1e-6 relative) on top of 1e-6 absolute
    torch.testing.assert_close(traced, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(fused, want, atol=1e-6, rtol=1e-6)
    # the unit-scale normalised values before gain and bias, to 1e-6 absolute
    plain = F.layer_norm(x, (64,), eps=cfg.norm_eps) if kind == "layernorm" else F.rms_norm(x, (64,), eps=cfg.norm_eps)
    torch.testing.assert_close(rec.finish()["normalized"], plain, atol=1e-6, rtol=0)
    assert (norm.bias is not None) == (kind == "layernorm" and bias)


def test_rope_matches_the_rotate_half_formula_and_is_relative():
    hd, base, t = 8, 10000.0, 6
    inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    angles = rope_angles(inv_freq, 3, t)  # positions 3..8
    x = torch.randn(2, 2, t, hd, generator=torch.Generator().manual_seed(0))
    # Llama / GPT-NeoX reference: x * cos + rotate_half(x) * sin, with cos/sin repeated per half
    pos = torch.arange(3, 3 + t, dtype=torch.float32)[:, None]
    freqs = torch.cat([pos * inv_freq, pos * inv_freq], -1)
    rotate_half = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
    torch.testing.assert_close(apply_rope(x, angles), x * freqs.cos() + rotate_half * freqs.sin(), atol=1e-6, rtol=0)
    # q.k after rotation depends only on the distance between positions
    q, k = torch.randn(hd), torch.randn(hd)

    def dot(pq, pk):
        rq = apply_rope(q[None], rope_angles(inv_freq, pq, 1))[0]
        rk = apply_rope(k[None], rope_angles(inv_freq, pk, 1))[0]
        return (rq @ rk).item()

    assert dot(5, 2) == pytest.approx(dot(12, 9), abs=1e-4)
    assert dot(5, 2) != pytest.approx(dot(5, 4), abs=1e-3)


def test_sinusoidal_table_matches_the_2017_formula():
    table = sinusoidal_table(20, 8)
    for p in (0, 1, 7, 19):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_activations_are_the_documented_functions(make_model):
    x = torch.linspace(-3, 3, 16).repeat(1, 2, 1)  # (1, 2, 16)
    for act, fn in [("gelu", F.gelu), ("relu", F.relu), ("gelu_tanh", lambda h: F.gelu(h, approximate="tanh"))]:
        mlp = make_model("tiny", activation=act).blocks[0].mlp
        rec = Recorder()
        with torch.no_grad():
            mlp(x, rec.scoped("mlp"))
        trace = rec.finish()
        torch.testing.assert_close(trace["mlp.post"], fn(trace["mlp.pre"]), atol=0, rtol=0)
    mlp = make_model("tiny", activation="swiglu").blocks[0].mlp
    rec = Recorder()
    with torch.no_grad():
        out = mlp(x, rec.scoped("mlp"))
        want = mlp.proj(F.silu(mlp.gate(x)) * mlp.fc(x))
        gate = mlp.gate(x)  # the same product as the forward's (autograd would pick F.linear: tfm.core.kernels)
    torch.testing.assert_close(out, want, atol=0, rtol=0)
    assert torch.equal(rec.finish()["mlp.pre"], gate)


def test_dropout_applies_on_both_paths_in_training_only():
    model = GPT(ModelConfig.preset("tiny", dropout=0.5))
    idx = tokens(1, 8)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(idx).logits, model(idx).logits)
        torch.testing.assert_close(model(idx, trace=True).logits, model(idx).logits, atol=ATOL, rtol=0)
    model.train()
    with torch.no_grad():
        for trace in (False, True):
            torch.manual_seed(0)
            a = model(idx, trace=trace).logits
            torch.manual_seed(1)
            b = model(idx, trace=trace).logits
            assert not torch.allclose(a, b), f"trace={trace}: dropout had no effect in training mode"


@pytest.mark.parametrize("tied", [True, False])
def test_matrices_are_stored_input_major_with_unchanged_shapes_values_and_files(tied, tmp_path):
    from tfm.text.tokenizer import Tokenizer
    from tfm.loaders.weights import load_tfm_folder, save_model

    cfg = ModelConfig.preset("tiny", tied_embeddings=tied)
    model = GPT(cfg)
    model.reset_parameters(torch.Generator().manual_seed(0))
    mats = {
        n: p
        for n, p in model.named_parameters()  # every block's nn.Linear matrix
        if p.dim() == 2 and n.startswith("blocks.")
    }
    assert len(mats) == 4 * cfg.n_layer
    for name, p in mats.items():  # (out, in) shape, (in, out) memory: GPT-2's Conv1D layout
        assert p.stride() == (1, p.shape[0]), name
        assert p.t().is_contiguous()
    # the unembedding (the embedding too, tied or not) stays (out, in), as Hugging Face's lm_head
    for name in ("unembed.weight", "tok_emb.weight"):
        assert getattr(model, name.split(".")[0]).weight.is_contiguous(), name
    assert model.unembed.weight is model.tok_emb.weight or not tied
    # values are drawn in logical order: the same as N(0, std) drawn into a plain tensor
    g = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else 0.02
            assert torch.equal(p, torch.empty(p.shape).normal_(0.0, std, generator=g)), name
    # files hold plain (out, in) tensors and loading keeps the layout
    ranks = {bytes([b]): b for b in range(256)}
    save_model(tmp_path, model, Tokenizer(ranks, {"<|endoftext|>": 256}, name="bytes"))
    loaded, _, _ = load_tfm_folder(tmp_path)
    for name, p in loaded.named_parameters():
        assert torch.equal(p, dict(model.named_parameters())[name])
        if name in mats:
            assert p.stride() == (1, p.shape[0]), name
        elif p.dim() == 2:
            assert p.is_contiguous(), name
