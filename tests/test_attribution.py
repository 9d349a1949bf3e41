"""tfm.analysis.attribution: direct logit attribution adds up exactly to the logit (every pre-norm
architecture variant), per-source and per-neuron splits add up to their component, and bad
requests are refused with clear messages."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from tfm.analysis import attribution

pytestmark = pytest.mark.usefixtures("one_thread")

POS = ("learned", "sinusoidal", "rope", "none")
VARIANTS = list(
    itertools.product(
        POS, ("layernorm", "rmsnorm"), ("gelu", "gelu_tanh", "relu", "swiglu"), (True, False), (True, False)
    )
)
IDS = [3, 17, 200, 5, 99, 17, 200, 41]


@pytest.fixture(autouse=True)
def _no_grad():
    """The model's own logits are the oracle here, read as floats: no graph to build."""
    with torch.no_grad():
        yield


def _cfg(pos, norm, act, bias, tied):
    return dict(pos_encoding=pos, norm=norm, activation=act, bias=bias, tied_embeddings=tied)


@pytest.mark.parametrize("pos,norm,act,bias,tied", VARIANTS)
def test_values_add_up_to_the_logit(make_model, pos, norm, act, bias, tied):
    model = make_model("tiny", **_cfg(pos, norm, act, bias, tied))
    a = attribution.direct(model, IDS, position=5)
    logits = model(torch.tensor([IDS])).logits[0, 5]
    assert a.token == int(logits.argmax())
    assert a.target == pytest.approx(float(logits[a.token]), rel=1e-6)
    total = float(a.values.sum())
    assert abs(total - a.target) <= 1e-4 * max(1.0, abs(a.target)), (total, a.target)
    names = set(a.components)
    assert ("pos_embed" in names) == (pos in ("learned", "sinusoidal"))
    assert len(a.components) == len(a.values) == (1 + (pos in ("learned", "sinusoidal")) + 2 * 3 + 1)
    assert torch.allclose(a.sources.sum(-1), a.heads, rtol=1e-4, atol=1e-5)  # by_source adds up (fp32)
    assert a.value("blocks.1.attn.head.0") == float(a.heads[1, 0])


@pytest.mark.parametrize("norm,bias", [("layernorm", True), ("rmsnorm", False), ("layernorm", False)])
def test_float64_model_is_exact_and_difference_works(make_model, norm, bias):
    """In float64 the identity holds to rounding: the decomposition is exact, not approximate."""
    model = make_model("tiny", norm=norm, bias=bias).double()
    logits = model(torch.tensor([IDS])).logits[0, -1]
    tok, vs = int(logits.argsort()[-1]), int(logits.argsort()[0])
    a = attribution.direct(model, IDS, token=tok, versus=vs)
    assert a.target == pytest.approx(float(logits[tok] - logits[vs]), abs=1e-12)
    assert float(a.values.sum()) == pytest.approx(a.target, abs=1e-10)
    for layer in range(2):
        for head in range(2):
            assert float(a.by_source(layer, head).sum()) == pytest.approx(float(a.heads[layer, head]), abs=1e-12)


def test_head_value_matches_an_independent_recomputation(make_model):
    """Head h's value = its own output (z_h W_O_h^T), centred, / std, . gain * W_U[token]."""
    model = make_model("tiny").double()
    a = attribution.direct(model, IDS, position=-1)
    tr = model(torch.tensor([IDS]), trace=True).trace
    blk, p = model.blocks[1], len(IDS) - 1
    z = tr["blocks.1.attn.z"][0, 0, p]  # head 0, (hd,)
    out = z @ blk.attn.proj.weight[:, :8].t()  # (D,)
    x = tr["ln_final.input"][0, p]
    std = (x.var(unbiased=False) + model.config.norm_eps).sqrt()
    expect = ((out - out.mean()) / std) @ (model.ln_final.weight * model.unembed.weight[a.token])
    assert float(a.heads[1, 0]) == pytest.approx(float(expect), abs=1e-10)
    mlp = tr["blocks.0.mlp_out"][0, p] - model.blocks[0].mlp.proj.bias  # the neurons' sum, bias apart
    expect = ((mlp - mlp.mean()) / std) @ (model.ln_final.weight * model.unembed.weight[a.token])
    assert float(a.mlps[0]) == pytest.approx(float(expect), abs=1e-10)


def test_post_norm_is_refused(make_model):
    with pytest.raises(ValueError, match="pre-norm"):
        attribution.direct(make_model("tiny", norm_placement="post"), IDS)


def test_bad_requests(make_model):
    model = make_model("tiny")
    with pytest.raises(ValueError, match="out of range"):
        attribution.direct(model, IDS, position=len(IDS))
    with pytest.raises(
        ValueError, match=rf"token={model.config.vocab_size} is out of range; .* \(an id in the vocabulary\)"
    ):
        attribution.direct(model, IDS, token=model.config.vocab_size)
    with pytest.raises(ValueError, match="same token"):
        attribution.direct(model, IDS, token=4, versus=4)
    assert attribution.direct(model, IDS, position=-len(IDS)).position == 0


def test_model_unchanged_and_top_neurons(make_model):
    model = make_model("tiny", activation="relu")
    before = copy.deepcopy(model.state_dict())
    a = attribution.direct(model, IDS)
    top = attribution.top_neurons(model, a, k=5, n_tokens=3)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [abs(n.value) for n in top] == sorted((abs(n.value) for n in top), reverse=True)
    assert abs(top[0].value) == pytest.approx(float(a.neurons.abs().max()))
    n = top[0]
    assert n.activation == pytest.approx(
        float(model(torch.tensor([IDS]), trace=True).trace[f"blocks.{n.layer}.mlp.post"][0, -1, n.index])
    )
    direction = model.blocks[n.layer].mlp.proj.weight[:, n.index] * model.ln_final.weight
    scores = model.unembed.weight @ (direction - direction.mean())
    assert n.promotes[0] == int(scores.argmax()) and n.suppresses[0] == int(scores.argmin())


def test_reusing_a_trace(make_model):
    model = make_model("tiny")
    with torch.no_grad():
        lazy = model(torch.tensor([IDS]), trace=True).trace
        eager = model(torch.tensor([IDS]), trace=True, lazy=False).trace
    a = attribution.direct(model, IDS)
    for tr in (lazy, eager):
        b = attribution.direct(model, IDS, trace=tr)
        assert torch.equal(a.values, b.values) and torch.equal(a.sources, b.sources)
    with pytest.raises(ValueError, match="same ids"):
        attribution.direct(model, IDS[:-1], trace=lazy)
    with pytest.raises(ValueError, match="trace of a forward"):
        attribution.direct(model, IDS, trace={"embed": torch.zeros(1, len(IDS), 16)})


def test_token_id_and_flow(make_model):
    import tfm

    lm = tfm.random_model("tiny")
    assert attribution.token_id(lm.tokenizer, "a", 257) == lm.tokenizer.encode("a")[0]
    with pytest.raises(ValueError, match="splits into 2"):
        attribution.token_id(lm.tokenizer, "ab", 257)
    tr = lm.model(torch.tensor([IDS]), trace=True).trace
    f = attribution.flow(lm, tr, 2, 8)
    l, t, s = 1, 4, 3  # recompute one edge: sum over heads of pattern * |v W_O_h|
    w_o = lm.model.blocks[l].attn.proj.weight.reshape(16, 2, 8)
    want = sum(
        float(tr[f"blocks.{l}.attn.pattern"][0, h, 2 + t, 2 + s])
        * float((w_o[:, h] @ tr[f"blocks.{l}.attn.v"][0, h, 2 + s]).norm())
        for h in range(2)
    )
    assert f.shape == (2, 6, 6) and float(f[l, t, s]) == pytest.approx(want, rel=1e-5)
    assert float(f[l, 2, 3]) == 0.0  # causal: position 4 cannot feed position 3


@pytest.mark.parametrize(
    "extra",
    [
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, n_kv_head=1),
        dict(pos_encoding="rope", rotary_pct=0.5, parallel_block=True, activation="gelu", tied_embeddings=False),
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, qkv_bias=True),
    ],
    ids=["multi-query", "partial-rotary-parallel", "qkv-bias"],
)
def test_family_pieces_add_up_in_float64(make_model, extra):
    """Grouped-query heads read shared values, the parallel block sums both branches: the
    decomposition and the per-source split still add up exactly."""
    model = make_model("tiny", **extra).double()
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0, -1]
        trace = model(torch.tensor([IDS]), trace=True).trace
    a = attribution.direct(model, IDS)
    assert float(a.values.sum()) == pytest.approx(float(logits[a.token]), abs=1e-10)
    assert torch.allclose(a.sources.sum(-1), a.heads, atol=1e-12)
    assert attribution.flow(model, trace, 0, len(IDS)).shape == (2, len(IDS), len(IDS))
