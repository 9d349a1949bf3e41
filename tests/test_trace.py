"""tfm.trace: pinned names and shapes, execution order, read-only traces, the documented
identities between trace entries, and concurrent tracing of one shared model."""

from __future__ import annotations

import threading

import pytest
import torch

from tfm.core import trace_names
from tfm.core.kv_cache import KVCache
from tfm.core.trace import Trace
from tfm.core.trace_names import AXES, axes_for

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread

B, T = 2, 5  # tiny preset: D=16, H=2, hd=8, F=32, V=257, 2 layers

# (name, shape, stored) in execution order. Pinned: any rename, reorder or shape change fails.
LEARNED_LAYERNORM_PRE = [
    ("embed", (2, 5, 16), True),
    ("pos_embed", (5, 16), True),
    ("blocks.0.resid_pre", (2, 5, 16), True),
    ("blocks.0.ln1.input", (2, 5, 16), True),
    ("blocks.0.ln1.mean", (2, 5), True),
    ("blocks.0.ln1.std", (2, 5), True),
    ("blocks.0.ln1.normalized", (2, 5, 16), True),
    ("blocks.0.ln1.output", (2, 5, 16), True),
    ("blocks.0.attn.qkv", (2, 5, 48), False),
    ("blocks.0.attn.q", (2, 2, 5, 8), True),
    ("blocks.0.attn.k", (2, 2, 5, 8), True),
    ("blocks.0.attn.v", (2, 2, 5, 8), True),
    ("blocks.0.attn.scores", (2, 2, 5, 5), True),
    ("blocks.0.attn.pattern", (2, 2, 5, 5), True),
    ("blocks.0.attn.z", (2, 2, 5, 8), True),
    ("blocks.0.attn.z_merged", (2, 5, 16), False),
    ("blocks.0.attn.result", (2, 2, 5, 16), True),
    ("blocks.0.attn_out", (2, 5, 16), True),
    ("blocks.0.resid_mid", (2, 5, 16), True),
    ("blocks.0.ln2.input", (2, 5, 16), True),
    ("blocks.0.ln2.mean", (2, 5), True),
    ("blocks.0.ln2.std", (2, 5), True),
    ("blocks.0.ln2.normalized", (2, 5, 16), True),
    ("blocks.0.ln2.output", (2, 5, 16), True),
    ("blocks.0.mlp.pre", (2, 5, 32), True),
    ("blocks.0.mlp.post", (2, 5, 32), True),
    ("blocks.0.mlp_out", (2, 5, 16), True),
    ("blocks.0.resid_post", (2, 5, 16), True),
    ("blocks.1.resid_pre", (2, 5, 16), True),
    ("blocks.1.ln1.input", (2, 5, 16), True),
    ("blocks.1.ln1.mean", (2, 5), True),
    ("blocks.1.ln1.std", (2, 5), True),
    ("blocks.1.ln1.normalized", (2, 5, 16), True),
    ("blocks.1.ln1.output", (2, 5, 16), True),
    ("blocks.1.attn.qkv", (2, 5, 48), False),
    ("blocks.1.attn.q", (2, 2, 5, 8), True),
    ("blocks.1.attn.k", (2, 2, 5, 8), True),
    ("blocks.1.attn.v", (2, 2, 5, 8), True),
    ("blocks.1.attn.scores", (2, 2, 5, 5), True),
    ("blocks.1.attn.pattern", (2, 2, 5, 5), True),
    ("blocks.1.attn.z", (2, 2, 5, 8), True),
    ("blocks.1.attn.z_merged", (2, 5, 16), False),
    ("blocks.1.attn.result", (2, 2, 5, 16), True),
    ("blocks.1.attn_out", (2, 5, 16), True),
    ("blocks.1.resid_mid", (2, 5, 16), True),
    ("blocks.1.ln2.input", (2, 5, 16), True),
    ("blocks.1.ln2.mean", (2, 5), True),
    ("blocks.1.ln2.std", (2, 5), True),
    ("blocks.1.ln2.normalized", (2, 5, 16), True),
    ("blocks.1.ln2.output", (2, 5, 16), True),
    ("blocks.1.mlp.pre", (2, 5, 32), True),
    ("blocks.1.mlp.post", (2, 5, 32), True),
    ("blocks.1.mlp_out", (2, 5, 16), True),
    ("blocks.1.resid_post", (2, 5, 16), True),
    ("ln_final.input", (2, 5, 16), True),
    ("ln_final.mean", (2, 5), True),
    ("ln_final.std", (2, 5), True),
    ("ln_final.normalized", (2, 5, 16), True),
    ("ln_final.output", (2, 5, 16), True),
    ("logits", (2, 5, 257), True),
]

# Post-norm: attn_out comes out before ln1 normalises the sum; no final norm.
ROPE_RMSNORM_SWIGLU_POST = [
    ("embed", (2, 5, 16), True),
    ("rope.angles", (5, 4), True),
    ("blocks.0.resid_pre", (2, 5, 16), True),
    ("blocks.0.attn.qkv", (2, 5, 48), False),
    ("blocks.0.attn.q", (2, 2, 5, 8), True),
    ("blocks.0.attn.k", (2, 2, 5, 8), True),
    ("blocks.0.attn.v", (2, 2, 5, 8), True),
    ("blocks.0.attn.scores", (2, 2, 5, 5), True),
    ("blocks.0.attn.pattern", (2, 2, 5, 5), True),
    ("blocks.0.attn.z", (2, 2, 5, 8), True),
    ("blocks.0.attn.z_merged", (2, 5, 16), False),
    ("blocks.0.attn.result", (2, 2, 5, 16), True),
    ("blocks.0.attn_out", (2, 5, 16), True),
    ("blocks.0.ln1.input", (2, 5, 16), True),
    ("blocks.0.ln1.rms", (2, 5), True),
    ("blocks.0.ln1.normalized", (2, 5, 16), True),
    ("blocks.0.ln1.output", (2, 5, 16), True),
    ("blocks.0.resid_mid", (2, 5, 16), True),
    ("blocks.0.mlp.pre", (2, 5, 32), True),
    ("blocks.0.mlp.up", (2, 5, 32), True),
    ("blocks.0.mlp.post", (2, 5, 32), True),
    ("blocks.0.mlp_out", (2, 5, 16), True),
    ("blocks.0.ln2.input", (2, 5, 16), True),
    ("blocks.0.ln2.rms", (2, 5), True),
    ("blocks.0.ln2.normalized", (2, 5, 16), True),
    ("blocks.0.ln2.output", (2, 5, 16), True),
    ("blocks.0.resid_post", (2, 5, 16), True),
    ("blocks.1.resid_pre", (2, 5, 16), True),
    ("blocks.1.attn.qkv", (2, 5, 48), False),
    ("blocks.1.attn.q", (2, 2, 5, 8), True),
    ("blocks.1.attn.k", (2, 2, 5, 8), True),
    ("blocks.1.attn.v", (2, 2, 5, 8), True),
    ("blocks.1.attn.scores", (2, 2, 5, 5), True),
    ("blocks.1.attn.pattern", (2, 2, 5, 5), True),
    ("blocks.1.attn.z", (2, 2, 5, 8), True),
    ("blocks.1.attn.z_merged", (2, 5, 16), False),
    ("blocks.1.attn.result", (2, 2, 5, 16), True),
    ("blocks.1.attn_out", (2, 5, 16), True),
    ("blocks.1.ln1.input", (2, 5, 16), True),
    ("blocks.1.ln1.rms", (2, 5), True),
    ("blocks.1.ln1.normalized", (2, 5, 16), True),
    ("blocks.1.ln1.output", (2, 5, 16), True),
    ("blocks.1.resid_mid", (2, 5, 16), True),
    ("blocks.1.mlp.pre", (2, 5, 32), True),
    ("blocks.1.mlp.up", (2, 5, 32), True),
    ("blocks.1.mlp.post", (2, 5, 32), True),
    ("blocks.1.mlp_out", (2, 5, 16), True),
    ("blocks.1.ln2.input", (2, 5, 16), True),
    ("blocks.1.ln2.rms", (2, 5), True),
    ("blocks.1.ln2.normalized", (2, 5, 16), True),
    ("blocks.1.ln2.output", (2, 5, 16), True),
    ("blocks.1.resid_post", (2, 5, 16), True),
    ("logits", (2, 5, 257), True),
]

# Axis names per trace name, space-separated.
PINNED_AXES = {
    "embed": "batch pos d_model",
    "pos_embed": "pos d_model",
    "rope.angles": "pos rotary_dim/2",
    "blocks.1.ln1.mean": "batch pos",
    "blocks.0.ln2.rms": "batch pos",
    "blocks.0.attn.qkv": "batch pos (head+2*kv_head)*d_head",
    "blocks.0.attn.q": "batch head pos d_head",
    "blocks.0.attn.k": "batch kv_head key_pos d_head",
    "blocks.1.attn.pattern": "batch head query_pos key_pos",
    "blocks.1.attn.scores": "batch head query_pos key_pos",
    "blocks.0.attn.z": "batch head query_pos d_head",
    "blocks.0.attn.result": "batch head pos d_model",
    "blocks.0.mlp.pre": "batch pos d_ff",
    "ln_final.output": "batch pos d_model",
    "logits": "batch pos vocab",
}

CONFIGS = {
    "learned-layernorm-pre": (dict(), LEARNED_LAYERNORM_PRE),
    "rope-rmsnorm-swiglu-post": (
        dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", norm_placement="post"),
        ROPE_RMSNORM_SWIGLU_POST,
    ),
}


def ids(b=B, t=T, seed=0):
    return torch.randint(0, 257, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("key", list(CONFIGS))
def test_names_shapes_and_order_are_pinned(key, make_model):
    overrides, expected = CONFIGS[key]
    model = make_model("tiny", **overrides)
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    got = [(e.name, e.shape, e.stored) for e in tr.shapes]
    assert got == expected
    for e in tr.shapes:
        assert e.dtype == "float32"
        assert len(e.axes) == len(e.shape), e.name
        if e.name in PINNED_AXES:
            assert e.axes == tuple(PINNED_AXES[e.name].split()), e.name
        assert e.as_dict() == {
            "name": e.name,
            "shape": list(e.shape),
            "axes": list(e.axes),
            "dtype": "float32",
            "stored": e.stored,
        }


@pytest.mark.parametrize("key", list(CONFIGS))
def test_every_stored_tensor_is_in_the_shape_trace_with_its_shape_and_axes(key, make_model):
    model = make_model("tiny", **CONFIGS[key][0])
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    names = [e.name for e in tr.shapes]
    assert len(names) == len(set(names)), "a name appears twice in the shape trace"
    stored = {e.name: e for e in tr.shapes if e.stored}
    assert set(stored) == set(tr), "stored shape entries and trace keys differ"
    assert list(tr) == list(stored), "trace keys are not in execution order"
    for name, tensor in tr.items():
        assert tuple(tensor.shape) == stored[name].shape, name
        assert tr.axes(name) == stored[name].axes == axes_for(name)
        assert not tensor.requires_grad
    assert len(tr) == sum(e.stored for e in tr.shapes) and tr.n_layers() == 2
    assert tr.stack("attn.pattern").shape == (2, B, 2, T, T)


def test_every_documented_name_has_axes_and_unknown_names_fail_clearly():
    doc = trace_names.__doc__
    for suffix in ("resid_pre", "attn.pattern", "attn.result", "mlp.post", "rope.angles", "logits"):
        assert suffix in doc and suffix in AXES
    with pytest.raises(KeyError, match="no axis names documented for trace name 'blocks.0.bogus'"):
        axes_for("blocks.0.bogus")


def test_patterns_are_causal_distributions_also_with_a_kv_cache(make_model):
    for pos in ("learned", "rope"):
        model = make_model("tiny", pos_encoding=pos)
        with torch.no_grad():
            tr = model(ids(t=9), trace=True).trace
            cache = KVCache(model.config, batch=B)
            model(ids(t=4), cache=cache)
            tr_chunk = model(ids(t=3, seed=1), trace=True, cache=cache).trace  # queries 4..6, keys 0..6
        for name in ("blocks.0.attn.pattern", "blocks.1.attn.pattern"):
            p = tr[name]
            torch.testing.assert_close(p.sum(-1), torch.ones(B, 2, 9), atol=1e-6, rtol=0)
            future = torch.ones(9, 9, dtype=torch.bool).triu(1)
            assert torch.all(p.triu(1) == 0), "attention to a future position"
            assert torch.all(p[..., ~future] > 0)
            scores = tr[name.replace("pattern", "scores")]
            assert torch.all(torch.isneginf(scores[..., future])) and torch.all(torch.isfinite(scores[..., ~future]))
            pc = tr_chunk[name]
            assert pc.shape == (B, 2, 3, 7)
            torch.testing.assert_close(pc.sum(-1), torch.ones(B, 2, 3), atol=1e-6, rtol=0)
            allowed = torch.arange(7)[None, :] <= torch.arange(4, 7)[:, None]
            assert torch.all(pc[..., ~allowed] == 0) and torch.all(pc[..., allowed] > 0)
        assert tr_chunk["blocks.0.attn.k"].shape == (B, 2, 7, 8)


def test_trace_is_read_only(make_model):
    with torch.no_grad():
        tr = make_model("tiny")(ids(), trace=True).trace
    assert isinstance(tr, Trace) and not hasattr(tr, "__setitem__") and not hasattr(tr, "__delitem__")
    with pytest.raises(TypeError):
        tr["logits"] = torch.zeros(1)  # type: ignore[index]
    with pytest.raises(TypeError):
        del tr["logits"]  # type: ignore[attr-defined]
    with pytest.raises(KeyError, match="'blocks.0.attn.patern' is not in the trace; similar names"):
        tr["blocks.0.attn.patern"]
    assert "logits" in tr and "nope" not in tr


@pytest.mark.parametrize("bias", [True, False])
def test_per_head_results_sum_to_the_attention_output(bias, make_model):
    model = make_model("tiny", bias=bias, n_head=4, d_model=32)
    with torch.no_grad():
        tr = model(ids(t=7), trace=True).trace
    for i in range(2):
        proj_bias = model.blocks[i].attn.proj.bias
        total = tr[f"blocks.{i}.attn.result"].sum(1) + (proj_bias if bias else 0)
        torch.testing.assert_close(total, tr[f"blocks.{i}.attn_out"], atol=1e-5, rtol=0)
        # z is pattern @ v, per head
        torch.testing.assert_close(
            tr[f"blocks.{i}.attn.z"], tr[f"blocks.{i}.attn.pattern"] @ tr[f"blocks.{i}.attn.v"], atol=1e-6, rtol=0
        )


def test_residual_identities_pre_norm(make_model):
    model = make_model("tiny")
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    torch.testing.assert_close(tr["blocks.0.resid_pre"], tr["embed"] + tr["pos_embed"], atol=0, rtol=0)
    for i in range(2):
        p = f"blocks.{i}."
        torch.testing.assert_close(tr[p + "resid_mid"], tr[p + "resid_pre"] + tr[p + "attn_out"], atol=0, rtol=0)
        torch.testing.assert_close(tr[p + "resid_post"], tr[p + "resid_mid"] + tr[p + "mlp_out"], atol=0, rtol=0)
        assert torch.equal(tr[p + "ln1.input"], tr[p + "resid_pre"])
        assert torch.equal(tr[p + "ln2.input"], tr[p + "resid_mid"])
    assert torch.equal(tr["blocks.1.resid_pre"], tr["blocks.0.resid_post"])
    assert torch.equal(tr["ln_final.input"], tr["blocks.1.resid_post"])
    torch.testing.assert_close(tr["logits"], model.unembed(tr["ln_final.output"]), atol=1e-6, rtol=0)


def test_residual_identities_post_norm(make_model):
    model = make_model("tiny", norm_placement="post", pos_encoding="sinusoidal")
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    for i in range(2):
        p = f"blocks.{i}."
        torch.testing.assert_close(tr[p + "ln1.input"], tr[p + "resid_pre"] + tr[p + "attn_out"], atol=0, rtol=0)
        assert torch.equal(tr[p + "resid_mid"], tr[p + "ln1.output"])
        torch.testing.assert_close(tr[p + "ln2.input"], tr[p + "resid_mid"] + tr[p + "mlp_out"], atol=0, rtol=0)
        assert torch.equal(tr[p + "resid_post"], tr[p + "ln2.output"])
    torch.testing.assert_close(tr["logits"], model.unembed(tr["blocks.1.resid_post"]), atol=1e-6, rtol=0)


def test_norm_statistics_are_what_the_doc_says(make_model):
    doc = trace_names.__doc__
    assert "per-token std sqrt(var + eps)" in doc and "sqrt(mean(x^2) + eps)" in doc
    eps = 1e-5
    model = make_model("tiny")
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    for n in ("blocks.0.ln1", "blocks.1.ln2", "ln_final"):
        x = tr[f"{n}.input"]
        torch.testing.assert_close(tr[f"{n}.mean"], x.mean(-1), atol=1e-6, rtol=0)
        torch.testing.assert_close(tr[f"{n}.std"], (x.var(-1, unbiased=False) + eps).sqrt(), atol=1e-6, rtol=1e-6)
        # ... which is x.std(unbiased=False) up to the eps inside the root
        torch.testing.assert_close(tr[f"{n}.std"], x.std(-1, unbiased=False), atol=1e-4, rtol=1e-4)
        normalized = (x - tr[f"{n}.mean"][..., None]) / tr[f"{n}.std"][..., None]
        torch.testing.assert_close(tr[f"{n}.normalized"], normalized, atol=1e-6, rtol=0)
    rms_model = make_model("tiny", norm="rmsnorm")
    with torch.no_grad():
        tr = rms_model(ids(), trace=True).trace
    x = tr["blocks.1.ln1.input"]
    torch.testing.assert_close(tr["blocks.1.ln1.rms"], (x.pow(2).mean(-1) + eps).sqrt(), atol=1e-6, rtol=1e-6)
    assert "blocks.1.ln1.std" not in tr and "blocks.1.ln1.mean" not in tr


def _all_hooks_empty(model) -> bool:
    return all(
        not m._forward_hooks
        and not m._forward_pre_hooks
        and not m._backward_hooks
        and not getattr(m, "_forward_hooks_with_kwargs", {})
        for m in model.modules()
    )


def test_eight_threads_tracing_one_shared_model_match_serial_runs(make_model):
    model = make_model("tiny", pos_encoding="rope", n_layer=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attrs_before = set(vars(model))
    prompts = [ids(b=1, t=4 + 3 * i, seed=i) for i in range(8)]
    with torch.no_grad():
        serial = [model(p, trace=True) for p in prompts]
    results: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            with torch.no_grad():
                for _ in range(5):
                    results[i] = model(prompts[i], trace=True)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    for want, got in zip(serial, results):
        assert torch.equal(got.logits, want.logits)
        assert list(got.trace) == list(want.trace)
        assert got.trace.shapes == want.trace.shapes
        for name in want.trace:
            assert torch.equal(got.trace[name], want.trace[name]), name
    assert _all_hooks_empty(model)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert set(vars(model)) == attrs_before and not model.training
