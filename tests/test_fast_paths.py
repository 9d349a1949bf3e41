"""The forward's faster routes compute what the plain formulas do: trace entries computed on
first read (per-head results, normalised norm inputs), the norm statistics taken from the fused
kernel, and the unembedding done in vocabulary slices."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from tfm.core import model as model_module
from tfm.core.model import GPT, unembed
from tfm.core.trace import Deferred, Recorder

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


def ids(b=2, t=6, vocab=257, seed=0):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def test_per_head_results_are_deferred_and_equal_z_times_each_heads_slice_of_w_o(make_model):
    model = make_model("tiny", n_head=4, d_model=32)
    with torch.no_grad():  # an eager trace (a lazy one computes the whole block when read: test_lazy_trace)
        tr = model(ids(), trace=True, lazy=False).trace
    assert isinstance(tr._tensors["blocks.1.attn.result"], Deferred)  # not computed by the forward
    for i in range(2):
        z, w = tr[f"blocks.{i}.attn.z"], model.blocks[i].attn.proj.weight  # (B, H, T, hd), (D, D)
        for h in range(4):
            want = z[:, h] @ w[:, h * 8 : (h + 1) * 8].T  # (B, T, D)
            torch.testing.assert_close(tr[f"blocks.{i}.attn.result"][:, h], want, atol=1e-6, rtol=0)
    assert not isinstance(tr._tensors["blocks.1.attn.result"], Deferred)  # kept once read
    assert tr["blocks.1.attn.result"] is tr["blocks.1.attn.result"]


def test_a_deferred_entry_read_by_eight_threads_at_once_is_computed_once():
    calls, started = [], threading.Event()

    def compute():
        calls.append(1)
        started.wait(5)  # hold the first computation until every thread is waiting on it
        return torch.arange(6.0)

    rec = Recorder()
    rec.add_deferred("blocks.0.attn.result", (1, 1, 2, 3), torch.float32, lambda: compute().view(1, 1, 2, 3))
    tr = rec.finish()
    got: list = [None] * 8
    barrier = threading.Barrier(8)

    def read(i):
        barrier.wait()
        got[i] = tr["blocks.0.attn.result"]

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    started.set()
    for th in threads:
        th.join(timeout=30)
    assert len(calls) == 1 and all(g is got[0] for g in got)
    assert torch.equal(got[0].flatten(), torch.arange(6.0))


def test_reading_results_after_the_weights_changed_in_place_refuses(make_model):
    model = make_model("tiny")
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
        model.blocks[0].attn.proj.weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="weights changed after this trace was recorded"):
        tr["blocks.0.attn.result"]
    assert tr["blocks.1.attn.result"].shape == (2, 2, 6, 16)  # its W_O is unchanged


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_deferred_normalized_and_fused_statistics_match_the_formulas(norm, make_model):
    model = make_model("tiny", norm=norm)
    x = torch.randn(2, 6, 16, requires_grad=True)
    rec = Recorder()
    out = model.blocks[0].ln1(x, rec)
    tr = rec.finish()
    assert out.requires_grad and not tr["normalized"].requires_grad  # the trace holds no graph
    xd = x.detach()
    if norm == "layernorm":
        var, mean = torch.var_mean(xd, -1, unbiased=False)
        torch.testing.assert_close(tr["mean"], mean, atol=1e-6, rtol=0)
        torch.testing.assert_close(tr["std"], (var + 1e-5).sqrt(), atol=1e-6, rtol=1e-6)
        want = (xd - mean[..., None]) / (var[..., None] + 1e-5).sqrt()
    else:
        want = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(tr["normalized"], want, atol=1e-6, rtol=0)
    out.sum().backward()  # gradients still flow through the traced norm
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("rows, vocab", [(16, 5000), (9, 4097), (1, 5000), (16, 300)])
def test_unembedding_equals_one_plain_product(rows, vocab):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, rows, 24, generator=g)
    w = torch.randn(vocab, 24, generator=g).t().contiguous().t()  # input-major; the model's is (out, in)
    with torch.no_grad():
        torch.testing.assert_close(unembed(x, w), F.linear(x, w), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(unembed(x, w.contiguous()), F.linear(x, w), atol=1e-5, rtol=1e-5)


def test_unembedding_in_a_model_matches_and_keeps_autograd():
    model = GPT(model_module.ModelConfig.preset("tiny"))
    x = ids(t=8)
    with torch.no_grad():
        logits = model(x).logits
        torch.testing.assert_close(logits, F.linear(model.hidden(x), model.unembed.weight), atol=1e-5, rtol=0)
    loss = model(x).logits.logsumexp(-1).mean()  # grad enabled: the plain product, differentiable
    loss.backward()
    assert model.tok_emb.weight.grad is not None


def test_every_entry_has_the_dtype_its_shape_entry_says_in_bfloat16(make_model):
    model = make_model("tiny").to(torch.bfloat16)
    with torch.no_grad():
        tr = model(ids(), trace=True).trace
    for e in tr.shapes:
        if e.stored:
            assert e.dtype == "bfloat16" and tr[e.name].dtype == torch.bfloat16, e.name
