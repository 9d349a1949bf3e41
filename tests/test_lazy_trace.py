"""tfm.core.lazy: a lazy trace equals the eager trace entry for entry (bit for bit) for every
architecture variant, computes a block only when one of its entries is read (once, whatever the
threads), holds what its byte budget allows, refuses changed weights, holds no autograd graph,
and keeps its laziness through `to()`."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

from tfm.core import lazy as lazy_module
from tfm.core.kv_cache import KVCache
from tfm.core.config import ModelConfig
from tfm.core.edits import AblateHead
from tfm.core.lazy import LazyTrace
from tfm.core.model import Block
from tfm.core.trace import Recorder, Trace, estimate_block_bytes, storage_bytes

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread

CORE = list(
    itertools.product(
        ("learned", "sinusoidal", "rope", "none"),
        ("layernorm", "rmsnorm"),
        ("pre", "post"),
        ("gelu", "gelu_tanh", "relu", "swiglu"),
    )
)  # 64
FLAGS = list(itertools.product((True, False), (True, False)))  # bias x tied, cycled over CORE


def variant(i: int) -> dict:
    pos, norm, placement, act = CORE[i]
    bias, tied = FLAGS[i % 4]
    return dict(pos_encoding=pos, norm=norm, norm_placement=placement, activation=act, bias=bias, tied_embeddings=tied)


def ids(b=2, t=7, seed=0):
    return torch.randint(0, 257, (b, t), generator=torch.Generator().manual_seed(seed))


def traces(model, idx, **kw):
    with torch.no_grad():
        return model(idx, trace=True, **kw), model(idx, trace=True, lazy=False, **kw)


def lazy_trace(model, idx) -> LazyTrace:
    with torch.no_grad():
        return model(idx, trace=True).trace


@pytest.fixture
def count_blocks(monkeypatch):
    """Counts Block.forward calls per block object (the main pass and every recomputation)."""
    calls: dict[int, int] = {}
    lock, original = threading.Lock(), Block.forward

    def counted(self, *args, **kwargs):
        with lock:
            calls[id(self)] = calls.get(id(self), 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Block, "forward", counted)
    return calls


# The Hugging Face families' pieces: grouped/multi-query attention, partial rotary with
# llama3 scaling, the parallel block, q/k/v-only bias (tiny has 2 heads: n_kv_head=1 is multi-query).
FAMILY = [
    dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, n_kv_head=1),
    dict(pos_encoding="rope", rotary_pct=0.5, parallel_block=True, activation="gelu", tied_embeddings=False),
    dict(
        pos_encoding="rope",
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        qkv_bias=True,
        n_kv_head=1,
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_original_context=16,
    ),
    dict(
        pos_encoding="rope",
        norm="rmsnorm",
        activation="geglu",
        bias=False,
        n_kv_head=1,
        head_dim=6,
        qk_norm=True,
        post_norms=True,
        scale_embeddings=True,
        attn_scalar=5.0,
        sliding_window=3,
        local_layers=(0,),
        rope_local_base=100.0,
    ),
]


@pytest.mark.parametrize("i", range(len(CORE)), ids=lambda i: "-".join(CORE[i]) + f"-{FLAGS[i % 4]}")
def test_every_entry_equals_the_eager_trace_bit_for_bit(i, make_model):
    check_equal_to_eager(make_model("tiny", **variant(i)))


@pytest.mark.parametrize("extra", FAMILY, ids=["gqa", "partial-rotary-parallel", "qkv-bias-llama3", "gemma3"])
def test_family_pieces_equal_the_eager_trace_bit_for_bit(extra, make_model):
    check_equal_to_eager(make_model("tiny", **extra))


def check_equal_to_eager(model):
    lazy, eager = traces(model, ids())
    assert isinstance(lazy.trace, LazyTrace) and not isinstance(eager.trace, LazyTrace)
    assert lazy.trace.shapes == eager.trace.shapes  # names, shapes, axes, dtypes, order, shape-only rows
    assert list(lazy.trace) == list(eager.trace) and len(lazy.trace) == len(eager.trace)
    assert torch.equal(lazy.logits, eager.logits)
    before = lazy.trace.nbytes
    for name in eager.trace:
        got, want = lazy.trace[name], eager.trace[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        assert torch.equal(got, want), name
        assert not got.requires_grad and got.grad_fn is None, name
    assert lazy.trace.nbytes > before


@pytest.mark.parametrize("i", [0, 21, 42, 63])
def test_a_trace_observes_the_forward_without_changing_its_numbers(i, make_model):
    """Traced or not, lazy or eager, the stream and the logits are the plain forward's bit for
    bit (attention is the fused kernel in all three); the recorded pattern is the explicit
    softmax beside it, so pattern @ v is the recorded z to float rounding only."""
    model = make_model("tiny", **variant(i))
    idx = ids()
    with torch.no_grad():
        plain = model(idx).logits
    lazy, eager = traces(model, idx)
    assert torch.equal(lazy.logits, plain) and torch.equal(eager.logits, plain)
    tr = eager.trace
    group = tr["blocks.1.attn.q"].shape[1] // tr["blocks.1.attn.v"].shape[1]
    v = tr["blocks.1.attn.v"].repeat_interleave(group, dim=1)
    torch.testing.assert_close(tr["blocks.1.attn.pattern"] @ v, tr["blocks.1.attn.z"], atol=1e-6, rtol=1e-5)


def test_the_first_pass_computes_no_pattern_it_does_not_keep(monkeypatch, make_model):
    """A lazy forward pays for the fused attention only: no (T, T) scores or softmax."""
    import tfm.core.functional as functional

    calls = []
    original = functional.attention_scores
    for module in (functional, lazy_module):  # the forward's and the recomputed block's
        monkeypatch.setattr(module, "attention_scores", lambda *a: calls.append(1) or original(*a))
    model = make_model("tiny", n_layer=3)
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
        assert calls == []
        tr["blocks.2.mlp.post"]  # a recomputed block derives no pattern either
        assert calls == []
        tr["blocks.2.attn.pattern"]
        assert len(calls) == 1
        model(ids(), trace=True, keep=("pattern",))
        assert len(calls) == 4  # keep=("pattern",): one per block, in the forward


@pytest.mark.parametrize("i", [0, 21, 42, 63])
def test_a_block_equals_its_direct_recomputation_from_the_stored_input(i, make_model):
    model = make_model("tiny", **variant(i))
    tr = traces(model, ids())[0].trace
    angles = tr["rope.angles"] if "rope.angles" in tr else None
    for layer in range(2):
        rec = Recorder()
        with torch.no_grad():
            out = model.blocks[layer](tr[f"blocks.{layer}.resid_pre"], rec.scoped(f"blocks.{layer}"), angles)
        direct = rec.finish()
        for name in direct:
            assert torch.equal(tr[name], direct[name]), name
        nxt = f"blocks.{layer + 1}.resid_pre" if layer == 0 else "blocks.1.resid_post"
        assert torch.equal(tr[nxt], out)


def test_the_forward_computes_no_block_twice_and_the_shape_trace_needs_none(count_blocks, make_model):
    model = make_model("tiny", n_layer=3)
    with torch.no_grad():
        out = model(ids(), trace=True)
    assert list(count_blocks.values()) == [1, 1, 1]  # the main pass only
    tr = out.trace
    assert len(tr.shapes) > len(tr) and list(tr) == [e.name for e in tr.shapes if e.stored]
    assert tr.residual_streams(1)[3][1].shape == (7, 16) and tr.logits_at(-1).shape == (257,)
    assert list(count_blocks.values()) == [1, 1, 1]  # keys, shapes, streams, last logits: nothing computed
    tr["blocks.1.attn.pattern"], tr["blocks.1.mlp.post"], tr["blocks.1.attn.result"], tr["blocks.1.attn.scores"]
    assert [count_blocks[id(b)] for b in model.blocks] == [1, 2, 1]


def test_held_bytes_grow_with_reads_and_fall_with_eviction_and_rereads_are_identical(count_blocks, make_model):
    model = make_model("tiny", n_layer=3)
    tr = lazy_trace(model, ids())
    stored = tr.nbytes
    assert stored == storage_bytes(v for v in tr._tensors.values() if isinstance(v, torch.Tensor)) + 2 * 257 * 4
    first = tr["blocks.0.attn.pattern"].clone()
    one = tr.nbytes
    assert one - stored == estimate_block_bytes(model.config, 7, batch=2)  # the estimate is exact here
    tr["blocks.0.attn.result"]
    assert tr.nbytes - one == 2 * 2 * 7 * 16 * 4  # (B, H, T, D), kept with its block
    tr.max_lazy_bytes = 0  # keeps only the group read last
    tr["blocks.1.attn.pattern"]
    assert tr.nbytes == one  # block 0 (with its result) dropped, block 1 as big as block 0 was
    again = tr["blocks.0.attn.pattern"]
    assert torch.equal(again, first) and count_blocks[id(model.blocks[0])] == 3  # main pass + 2 reads
    tr.max_lazy_bytes = 10**9
    tr["blocks.1.attn.pattern"], tr["blocks.2.attn.pattern"]
    assert tr.nbytes == stored + 3 * (one - stored)
    tr["logits"]
    assert tr.nbytes == stored + 3 * (one - stored) + 2 * 7 * 257 * 4


def test_eight_threads_compute_each_block_once(count_blocks, make_model):
    model = make_model("tiny", n_layer=4)
    tr = lazy_trace(model, ids())
    names = [
        "blocks.1.attn.pattern",
        "blocks.1.mlp.post",
        "blocks.2.attn.z",
        "blocks.2.resid_post",
        "blocks.3.attn.result",
        "blocks.1.attn.pattern",
        "blocks.3.ln2.normalized",
        "blocks.2.attn.scores",
    ]
    got: list = [None] * 8
    barrier = threading.Barrier(8)

    def read(k):
        barrier.wait()
        got[k] = tr[names[k]]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert [count_blocks[id(b)] for b in model.blocks] == [1, 2, 2, 2]
    with torch.no_grad():
        eager = model(ids(), trace=True, lazy=False).trace
    for k, name in enumerate(names):
        assert torch.equal(got[k], eager[name]), name
    assert got[0] is got[5]


def test_weights_changed_in_place_refuse_clearly(make_model):
    model = make_model("tiny")
    tr = traces(model, ids())[0].trace
    with torch.no_grad():
        model.blocks[0].mlp.fc.weight.mul_(2.0)
        model.unembed.weight.add_(1.0)
    for name in ("blocks.0.attn.pattern", "logits"):
        with pytest.raises(RuntimeError, match="weights changed after this trace was recorded"):
            tr[name]
    with pytest.raises(RuntimeError, match="weights changed"):
        tr.logits_at(2)
    assert tr["blocks.1.attn.pattern"].shape == (2, 2, 7, 7)  # block 1's weights are unchanged


def test_when_a_trace_is_lazy(make_model):
    model = make_model("tiny")
    with torch.no_grad():
        assert isinstance(model(ids(), trace=True).trace, LazyTrace)
        cache = KVCache(model.config, batch=2)
        assert not isinstance(model(ids(), trace=True, cache=cache).trace, LazyTrace)
        with pytest.raises(ValueError, match="needs eval mode and no KV cache"):
            model(ids(), trace=True, cache=KVCache(model.config, batch=2), lazy=True)
    with pytest.raises(ValueError, match="pass trace=True as well"):
        model(ids(), lazy=True)
    eager = model(ids(), trace=True)  # autograd on: the caller may differentiate
    assert not isinstance(eager.trace, LazyTrace) and eager.logits.requires_grad
    lazy = model(ids(), trace=True, lazy=True)  # asked for with autograd on: logits keep their graph
    assert isinstance(lazy.trace, LazyTrace) and lazy.logits.requires_grad
    for name in lazy.trace:
        assert lazy.trace[name].grad_fn is None and not lazy.trace[name].requires_grad, name
    assert torch.equal(lazy.trace["blocks.1.mlp.post"], eager.trace["blocks.1.mlp.post"])
    model.train()
    with torch.no_grad():
        assert not isinstance(model(ids(), trace=True).trace, LazyTrace)


def test_last_only_and_logits_at(make_model):
    model = make_model("tiny", norm_placement="post")
    idx = ids()
    with torch.no_grad():
        full = model(idx, trace=True, lazy=False).logits
        out = model(idx, trace=True, last_only=True)
        tr = model(idx, trace=True).trace
    # the trace is the same whatever last_only says: its logits entry is every position's, when read
    assert out.logits.shape == (2, 1, 257) and out.trace.shapes == tr.shapes
    assert torch.equal(out.trace.logits_at(-1), out.logits[:, -1][0])
    torch.testing.assert_close(out.trace["logits"], full, atol=1e-5, rtol=0)
    for trace in (tr, out.trace):
        for b, pos in ((0, 0), (1, 3), (1, 6), (0, -1)):
            torch.testing.assert_close(trace.logits_at(pos, b), full[b, pos], atol=1e-5, rtol=0)
    assert torch.equal(tr["logits"], full)
    with pytest.raises(ValueError, match="out of range"):
        tr.logits_at(7)


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_to_keeps_laziness_and_moves_what_it_computes(pos, make_model):
    model = make_model("tiny", pos_encoding=pos)
    lazy, eager = traces(model, ids())
    assert lazy.trace.to("cpu", torch.float32) is lazy.trace
    for dtype in (torch.float64, torch.bfloat16):
        moved = lazy.trace.to("cpu", dtype)
        assert isinstance(moved, LazyTrace) and moved.shapes == lazy.trace.shapes and list(moved) == list(lazy.trace)
        before = moved.nbytes
        for name in ("blocks.1.attn.pattern", "blocks.0.attn.result", "blocks.1.ln1.input", "logits", "embed"):
            assert moved[name].dtype == dtype and torch.equal(moved[name], eager.trace[name].to(dtype)), name
        assert moved.nbytes > before
        held = moved._held()
        assert all(t.dtype == dtype for t in held if t.is_floating_point()) == (dtype == torch.float64)
        if dtype == torch.bfloat16:  # recomputation inputs kept as recorded: the only float32 memory
            assert {id(t) for t in held if t.dtype == torch.float32} == {id(t) for t in moved._inputs.values()}
    twice = lazy.trace.to(dtype=torch.float64).to(dtype=torch.bfloat16)
    assert torch.equal(twice["blocks.0.mlp.pre"], eager.trace["blocks.0.mlp.pre"].to(torch.bfloat16))


def test_eager_trace_to_moves_tensors_and_deferred_entries():
    cfg = ModelConfig.preset("tiny")
    rec = Recorder()
    rec.add("embed", torch.ones(1, 2, cfg.d_model))
    rec.add_deferred("blocks.0.attn.result", (1, 1, 2, 3), torch.float32, lambda: torch.ones(1, 1, 2, 3))
    tr = rec.finish()
    assert tr.to("cpu") is tr and tr.nbytes == 2 * cfg.d_model * 4
    moved = tr.to(dtype=torch.float16)
    assert isinstance(moved, Trace) and moved["embed"].dtype == torch.float16
    assert moved["blocks.0.attn.result"].dtype == torch.float16 and moved.nbytes == (2 * cfg.d_model + 6) * 2


@pytest.mark.parametrize(
    "extra", [{}, *FAMILY], ids=["gpt2-like", "gqa", "partial-rotary-parallel", "qkv-bias-llama3", "gemma3"]
)
def test_keep_patterns_stores_every_pattern_in_the_forward(extra, count_blocks, make_model):
    model = make_model("tiny", n_layer=3, **extra)
    with torch.no_grad():
        eager = model(ids(), trace=True, lazy=False)
        count_blocks.clear()
        out = model(ids(), trace=True, keep=("pattern",))
    tr = out.trace
    assert isinstance(tr, LazyTrace) and tr.shapes == eager.trace.shapes and list(tr) == list(eager.trace)
    assert torch.equal(out.logits, eager.logits) and torch.equal(tr.logits_at(-1, 1), eager.logits[1, -1])
    counts = [count_blocks[id(b)] for b in model.blocks]
    assert counts == [1, 1, 1]  # the main pass only
    stored = tr.nbytes
    for layer in range(3):
        assert torch.equal(tr.pattern(layer, 1), eager.trace.pattern(layer, 1))
    assert [count_blocks[id(b)] for b in model.blocks] == [1, 1, 1] and tr.nbytes == stored  # no block recomputed
    assert stored == lazy_trace(model, ids()).nbytes + 3 * 2 * 2 * 7 * 7 * 4  # + (B, H, T, S) per block
    count_blocks.clear()
    kept = tr["blocks.1.attn.pattern"]
    for name in eager.trace:  # any other entry: its block recomputed, equal to the eager trace
        assert torch.equal(tr[name], eager.trace[name]), name
    assert [count_blocks[id(b)] for b in model.blocks] == [1, 1, 1] and tr["blocks.1.attn.pattern"] is kept


def test_keep_accepts_block_entries_only_and_needs_a_lazy_trace(make_model):
    model = make_model("tiny", n_layer=2)
    with torch.no_grad():
        tr = model(ids(), trace=True, keep=("z", "mlp_post")).trace
        eager = model(ids(), trace=True, lazy=False).trace
        assert torch.equal(tr["blocks.1.attn.z"], eager["blocks.1.attn.z"])
        assert (
            tr._tensors["blocks.1.mlp.post"] is not lazy_module.LAZY
            and tr._tensors["blocks.1.attn.q"] is lazy_module.LAZY
        )
        for keep, match in (
            ("pattern", "tuple of concept names"),
            (("result",), "can store only"),
            (("embed",), "can store only"),
            (("blocks.0.attn.pattern",), "can store only"),
        ):
            with pytest.raises(ValueError, match=match):
                model(ids(), trace=True, keep=keep)
        with pytest.raises(ValueError, match="drop keep"):
            model(ids(), trace=True, lazy=False, keep=("pattern",))
        with pytest.raises(ValueError, match="needs eval mode and no KV cache"):
            model(ids(), trace=True, cache=KVCache(model.config, batch=2), keep=("pattern",))
        with pytest.raises(ValueError, match="traced eagerly"):
            model(ids(), trace=True, keep=("pattern",), edits=[AblateHead(0, 0)])
    with pytest.raises(ValueError, match="pass trace=True as well"):
        model(ids(), keep=("pattern",))
