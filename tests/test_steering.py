"""Steering (tfm.core.edits.Steer, tfm.analysis.steering): strength 0 is bit-identical to no
edit, a steer equals writing the steered stream in by hand (Patch), positions are absolute
across KV-cached generation steps, steered generation is reproducible per seed, the batched
sweep equals one forward per strength, the shared model's weights never change, and bad input
gets one clear message."""
from __future__ import annotations

import hashlib
import math

import pytest
import torch

import tfm
from tfm.analysis import steering
from tfm.analysis.sae import stream_at
from tfm.core import edits as E

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 17, 200, 5, 99, 17, 200, 41, 7, 3]])


@pytest.fixture
def model(make_model):
    return make_model("tiny", n_layer=3, n_head=4, d_model=16)


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


def _logits(model, edits=None, ids=IDS):
    with torch.no_grad():
        return model(ids, edits=edits).logits


def _weights_hash(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def test_strength_zero_is_bit_identical(model):
    v = torch.randn(16)
    for point in ("resid_pre", "resid_post"):
        assert torch.equal(_logits(model, [E.Steer(1, v, 0.0, point=point)]), _logits(model))
    assert not torch.equal(_logits(model, [E.Steer(1, v, 0.5)]), _logits(model))


def test_steer_equals_patching_the_steered_stream(model):
    v, s = torch.randn(16), 2.5
    with torch.no_grad():
        x = stream_at(model, IDS, 2)[0]                                  # (T, D) entering block 2
    want = x.clone()
    want[4:7] += s * v
    got = _logits(model, [E.Steer(2, v, s, start=4, stop=7)])
    assert torch.allclose(got, _logits(model, [E.Patch("blocks.2.resid_pre", want)]), atol=1e-6)
    # resid_post of block 1 is resid_pre of block 2
    assert torch.allclose(got, _logits(model, [E.Steer(1, v, s, start=4, stop=7, point="resid_post")]), atol=1e-6)


def test_steer_composes_with_ablation_and_rows(model):
    v = torch.randn(16)
    both = _logits(model, [E.Steer(0, v, 1.0), E.AblateHead(1, 2)])
    assert not torch.allclose(both, _logits(model, [E.AblateHead(1, 2)]), atol=1e-4)
    batch = IDS.repeat(2, 1)
    out = _logits(model, [E.Steer(0, v, 1.0, row=1)], batch)
    assert torch.equal(out[0], _logits(model)[0])
    assert torch.allclose(out[1], _logits(model, [E.Steer(0, v, 1.0)])[0], atol=1e-6)


def test_sweep_equals_one_forward_per_strength(lm):
    ids = lm.tokenizer.prompt_ids("Once upon a time there was a little")
    vec = steering.pair_vector(lm, "happy happy joy", "sad and angry", 3)
    token = lm.tokenizer.encode(" girl")[0]
    strengths = [-4.0, 0.0, 2.0, 8.0]
    got = steering.sweep(lm, ids, vec, strengths, token)
    for s, p in zip(strengths, got):
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids]), edits=[vec.edit(s)]).logits[0, -1]
        assert math.isclose(float(p), float(logits.softmax(-1)[token]), rel_tol=1e-4, abs_tol=1e-7)
    assert len(set(round(float(p), 6) for p in got)) == 4


def test_steered_generation_reproducible_cached_and_model_unchanged(lm):
    before = _weights_hash(lm.model)
    vec = steering.pair_vector(lm, "The dog ran to the park", "The cat sat", 2, how="mean")
    n = len(lm.tokenizer.prompt_ids("Once upon a time"))
    edits = [vec.edit(6.0, start=n)]                         # the generated tokens only

    def text(use_cache=True, edits=edits):
        g = tfm.generate(lm, "Once upon a time", 12, temperature=1.0, seed=7, use_cache=use_cache, edits=edits)
        return [s.token_id for s in g]

    a = text()
    assert a == text()                                       # same seed, same steered tokens
    assert a == text(use_cache=False)                        # absolute positions across cached steps
    assert a != text(edits=())                               # and the steering did something
    plain, steered = steering.steered_pair(lm, "Once upon a time", vec, 0.0, seed=3, max_new_tokens=10)
    assert plain == steered                                  # strength 0: the same text
    steering.sweep(lm, lm.tokenizer.prompt_ids("Hi"), vec, [1.0, 5.0], 5)
    assert _weights_hash(lm.model) == before


@pytest.mark.parametrize("strength", [math.nan, math.inf, -math.inf, 1e6, True, "3"])
def test_bad_strengths_refused(strength):
    with pytest.raises(ValueError, match="strength"):
        E.Steer(0, torch.ones(4), strength)


def test_bad_vectors_layers_and_prompts(lm, model):
    with pytest.raises(ValueError, match="NaN or infinite"):
        E.Steer(0, torch.tensor([1.0, math.nan]), 1.0)
    with pytest.raises(ValueError, match="residual stream has 16"):
        _logits(model, [E.Steer(0, torch.ones(5), 1.0)])
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        _logits(model, [E.Steer(3, torch.ones(16), 1.0)])
    with pytest.raises(ValueError, match="layer"):
        steering.pair_vector(lm, "a", "b", lm.config.n_layer)
    with pytest.raises(ValueError, match="negative prompt is empty"):
        steering.pair_vector(lm, "a", "", 1)
    with pytest.raises(ValueError, match="reads at most"):
        steering.pair_vector(lm, "a " * 400, "b", 1)
    with pytest.raises(ValueError, match="start < stop"):
        E.Steer(0, torch.ones(4), 1.0, start=5, stop=5)
    with pytest.raises(ValueError, match="strength"):
        tfm.generate(lm, "Hi", 3, edits=[E.Steer(0, torch.ones(lm.config.d_model), math.nan)])
    with pytest.raises(ValueError, match="strengths"):
        steering.sweep(lm, [1, 2], steering.pair_vector(lm, "a", "b", 1), [], 3)


def test_pairs_of_any_lengths_and_read_out(lm):
    short, long = "Yes", "She was very very happy and smiled all day long in the sun"
    v_last = steering.pair_vector(lm, long, short, 3)
    v_mean = steering.pair_vector(lm, long, short, 3, how="mean")
    with torch.no_grad():
        xs = [stream_at(lm.model, torch.tensor([lm.tokenizer.prompt_ids(t)]), 3)[0] for t in (long, short)]
    assert torch.allclose(v_last.vector, xs[0][-1] - xs[1][-1], atol=1e-6)
    assert torch.allclose(v_mean.vector, xs[0][1:].mean(0) - xs[1][0], atol=1e-6)   # "Yes" is one token
    up, up_s, down, down_s = steering.read_out(lm, v_last.vector, 5)
    g, u = lm.model.ln_final.weight, lm.model.unembed.weight
    d = v_last.vector * g
    scores = u @ (d - d.mean())
    assert up == scores.topk(5).indices.tolist() and down == (-scores).topk(5).indices.tolist()
    assert up_s[0] >= up_s[-1] and down_s[0] <= down_s[-1]
