"""tfm.core.kernels: the linear maps' product choice (oneDNN or torch's BLAS) changes no result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tfm.core import kernels
from tfm.core.config import ModelConfig
from tfm.core.model import GPT

ROOT = Path(__file__).resolve().parents[1]
needs_onednn = pytest.mark.skipif(not kernels.ONEDNN_AVAILABLE, reason="this torch build has no oneDNN linear")


@pytest.fixture
def spy(monkeypatch, every_product_onednn):
    """Counts the calls that reach oneDNN; any size qualifies (the size rule has its own test)."""
    calls = []
    real = kernels._onednn_linear

    def counted(*args):
        calls.append(tuple(args[0].shape))
        return real(*args)

    monkeypatch.setattr(kernels, "_onednn_linear", counted)
    return calls


def operands(x_shape, out=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*x_shape, generator=g)
    w = torch.randn(out, x_shape[-1], generator=g) * 0.1
    return x, w, torch.randn(out, generator=g)


@needs_onednn
@pytest.mark.parametrize("x_shape", [(5, 32), (2, 7, 32), (1, 1, 32)])
@pytest.mark.parametrize("layout", ["out-in", "in-out"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_onednn_equals_f_linear(spy, x_shape, layout, with_bias):
    x, w, b = operands(x_shape)
    w = w if layout == "out-in" else w.t().contiguous().t()  # the model's input-major storage
    b = b if with_bias else None
    with torch.no_grad():
        got = kernels.linear(x, w, b)
    assert spy == [x_shape]
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_non_contiguous_input(spy):
    x, w, b = operands((3, 9, 32))
    x = x[:, 1::2]  # (3, 4, 32), strided
    with torch.no_grad():
        torch.testing.assert_close(kernels.linear(x, w, b), F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    assert spy == [(3, 4, 32)]


@needs_onednn
def test_odd_inputs(spy):
    x, w, b = operands((1, 6, 32))
    with torch.no_grad():
        wide = x.expand(3, 6, 32)  # stride 0 over the batch (patching sweeps)
        torch.testing.assert_close(kernels.linear(wide, w, b), F.linear(wide, w, b), atol=1e-5, rtol=1e-5)
        vector = x[0, 0]  # (32,) -> (48,)
        torch.testing.assert_close(kernels.linear(vector, w, b), F.linear(vector, w, b), atol=1e-5, rtol=1e-5)
        assert kernels.linear(x[:, :0], w, b).shape == (1, 0, 48)
    assert spy == [(3, 6, 32)]


@needs_onednn
def test_what_oneDNN_does_not_take_goes_to_f_linear(spy):
    x, w, b = operands((4, 32), out=64)
    sliced = w.t().contiguous().t()[:40]  # rows of an input-major matrix: neither layout is contiguous
    with torch.no_grad():
        torch.testing.assert_close(kernels.linear(x, sliced), F.linear(x, sliced), atol=1e-5, rtol=1e-5)
        assert kernels.linear(x.double(), w.double()).dtype == torch.float64
        with kernels.using_cpu_product("blas"):
            kernels.linear(x, w, b)
    assert spy == []


@needs_onednn
@pytest.mark.parametrize(
    "rows, d_in, d_out, onednn",
    [
        (1, 192, 576, False),  # the bundled model's decode step: oneDNN's call overhead loses
        (128, 192, 192, False),  # little work
        (128, 192, 576, True),  # enough work
        (1, 768, 2304, True),  # a large matrix even on one row (GPT-2's qkv in a decode step)
    ],
)
def test_size_rule(monkeypatch, rows, d_in, d_out, onednn):
    calls = []
    monkeypatch.setattr(kernels, "_cpu_product", "onednn")  # the rule alone, no measuring
    monkeypatch.setattr(kernels, "_onednn_linear", lambda *a: calls.append(1) or F.linear(*a[:3]))
    with torch.no_grad():
        kernels.linear(torch.zeros(rows, d_in), torch.zeros(d_out, d_in))
    assert bool(calls) == onednn


def test_autograd_uses_the_differentiable_product(spy):
    x, w, b = operands((4, 32))
    w.requires_grad_(True)
    kernels.linear(x, w, b).square().sum().backward()
    want = torch.autograd.grad(F.linear(x, w, b).square().sum(), w)[0]
    torch.testing.assert_close(w.grad, want)
    assert spy == []


def test_unknown_choice_is_refused_and_setting_restored():
    before = kernels.cpu_product()
    with pytest.raises(ValueError, match="not one of"):
        with kernels.using_cpu_product("mkl"):
            pass
    with kernels.using_cpu_product("blas"):
        assert kernels.cpu_product() == "blas"
    assert kernels.cpu_product() == before


@needs_onednn
@pytest.mark.parametrize(
    "cfg",
    [
        ModelConfig.preset("tiny"),
        ModelConfig.preset("llama-tiny", n_layer=2, n_kv_head=2),
        ModelConfig.preset("tiny", pos_encoding="rope", parallel_block=True, qkv_bias=True),
    ],
    ids=["gpt2-like", "llama-gqa", "neox-like"],
)
def test_model_results_equal_under_both_products(spy, cfg):
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fast = model(idx, trace=True, lazy=False)
        assert spy, "a float32 CPU forward goes through oneDNN"
        with kernels.using_cpu_product("blas"):
            plain = model(idx, trace=True, lazy=False)
    torch.testing.assert_close(fast.logits, plain.logits, atol=1e-5, rtol=1e-5)
    for i in range(cfg.n_layer):
        torch.testing.assert_close(fast.trace.pattern(i), plain.trace.pattern(i), atol=1e-6, rtol=0)


MEMORY_PROBE = """
import ctypes, os
import psutil, torch
from tfm.core import kernels
torch.set_num_threads(1)
libc, proc = ctypes.CDLL("libc.so.6"), psutil.Process()
def rss():
    libc.malloc_trim(0)  # count what is held, not what the allocator has yet to give back
    return proc.memory_info().rss
ws = [torch.randn(o, i).t().contiguous().t() for i, o in [(768, 3072), (3072, 768)]]
with torch.no_grad():
    for w in ws:
        kernels.linear(torch.randn(1, w.shape[1]), w)
    base = rss()
    for rows in range(2, 200):  # ~400 product shapes, as a server sees prompts of every length
        for w in ws:
            kernels.linear(torch.randn(rows, w.shape[1]), w)
print(os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], os.environ["LRU_CACHE_CAPACITY"], (rss() - base) / 2**20)
"""


@pytest.mark.slow  # ~400 product shapes in a subprocess: CI only
@needs_onednn
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_shape_caches_stay_bounded_whatever_the_prompt_lengths():
    """Unbounded, oneDNN's caches grew by ~235 MB on this probe (1024 entries each by default)."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env["LRU_CACHE_CAPACITY"] = ""  # an empty value crashes torch's first oneDNN product: replaced
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    primitive_cap, lru_cap, grew_mib = done.stdout.split()
    assert primitive_cap == lru_cap == str(kernels.ONEDNN_CACHE_ENTRIES)
    assert float(grew_mib) < 48, f"{grew_mib} MiB held after ~400 product shapes"


def test_an_operators_cache_setting_is_kept():
    env = {**os.environ, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "7"}
    code = "import os, tfm.core.kernels; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "7", done.stderr[-2000:]


@pytest.mark.parametrize(
    "value, ok",
    [
        ("blas", True),
        pytest.param("onednn", True, marks=pytest.mark.slow),
        pytest.param("mkl", False, marks=pytest.mark.slow),
    ],
)  # quick: one subprocess
def test_the_server_wide_product_setting(value, ok):
    env = {**os.environ, "TFM_CPU_PRODUCT": value}
    code = "import tfm.core.kernels as k; print(k.cpu_product())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    if ok:
        assert done.stdout.strip() == value, done.stderr[-2000:]
    else:
        assert done.returncode != 0 and "CPU product 'mkl' is not one of ('auto', 'onednn', 'blas')" in done.stderr


@needs_onednn
@pytest.mark.parametrize("onednn_wins", [True, False])
def test_auto_measures_once_per_shape_and_bucket_and_keeps_the_winner(monkeypatch, onednn_wins):
    """ "auto" times both products the first time a weight meets a row bucket, then keeps that
    product for the bucket; results equal F.linear's either way."""
    timed, calls = [], []
    real = kernels._onednn_linear
    monkeypatch.setattr(kernels, "_cpu_product", "auto")
    monkeypatch.setattr(kernels, "_chosen", {})
    winner = "onednn" if onednn_wins else "blas"
    monkeypatch.setattr(kernels, "_fastest", lambda rows, w, b: timed.append(rows) or winner)
    monkeypatch.setattr(kernels, "_onednn_linear", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    x, w, b = operands((300, 1024), out=1024)
    with torch.no_grad():
        for rows in (1, 1, 5, 7, 128, 300, 20):
            torch.testing.assert_close(kernels.linear(x[:rows], w, b), F.linear(x[:rows], w, b), atol=1e-4, rtol=1e-5)
    assert timed == [1, 8, 128, 32]  # buckets 1, 8, 128 (and over), 32
    assert calls == ([1, 1, 5, 7, 128, 300, 20] if onednn_wins else [])
    assert len(kernels.measured()) == 4 and set(kernels.measured().values()) == {winner}


@needs_onednn
def test_auto_really_times_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(kernels, "_cpu_product", "auto")
    monkeypatch.setattr(kernels, "_chosen", {})
    monkeypatch.setattr(kernels, "MAX_MEASURED", 1)
    x, w, _ = operands((64, 1024), out=1024)
    state = torch.get_rng_state()
    with torch.no_grad():
        kernels.linear(x, w)  # measured: bucket 128
        kernels.linear(x[:1], w)  # the table is full: BLAS, unmeasured
    assert list(kernels.measured()) == [((1024, 1024), (1024, 1), False, 128)]
    assert torch.equal(torch.get_rng_state(), state)  # measuring drew no random numbers


@pytest.mark.parametrize("budget, rounds", [(1e9, kernels.ROUNDS), (0.0, 1)])
def test_timing_stops_after_its_budget(monkeypatch, budget, rounds):
    """A long product (Gemma 3's unembedding) is timed in as few rounds as MEASURE_S allows, at least one."""
    calls = []
    monkeypatch.setattr(kernels, "MEASURE_S", budget)
    monkeypatch.setattr(kernels, "_run", lambda product, x, w, b: calls.append(product))
    _, w, _ = operands((8, 64), out=kernels.SLICED_MIN_OUT)
    kernels._fastest(32, w, None)
    assert calls == ["blas", "onednn", "sliced"] * (1 + rounds)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("input_major", [False, True])
def test_sliced_product_equals_f_linear(bias, input_major):
    """BLAS over SLICE-column slices: every output column written once, in its place, for 3-D
    input, a ragged last slice, either weight layout, with or without bias."""
    x, w, b = operands((2, 9, 64), out=2 * kernels.SLICE + 37)
    w = w.t().contiguous().t() if input_major else w
    b = b if bias else None
    with torch.no_grad():
        got = kernels.sliced_linear(x, w, b)
    assert got.shape == (2, 9, w.shape[0])
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-5, rtol=1e-5)


@needs_onednn
def test_auto_offers_the_sliced_product_to_vocabulary_sized_matrices_only(monkeypatch):
    monkeypatch.setattr(kernels, "_cpu_product", "auto")
    monkeypatch.setattr(kernels, "_chosen", {})
    vocab = torch.zeros(kernels.SLICED_MIN_OUT, 64)
    assert kernels._candidates(128, vocab) == ("blas", "onednn", "sliced")
    assert kernels._candidates(1, vocab) == ("blas", "onednn")  # a decode step: not tried
    assert kernels._candidates(128, torch.zeros(kernels.SLICED_MIN_OUT - 1, 64)) == ("blas", "onednn")
    # when it measures fastest, linear runs it, and the result is F.linear's
    monkeypatch.setattr(kernels, "_fastest", lambda rows, w, b: "sliced")
    used = []
    real = kernels.sliced_linear
    monkeypatch.setattr(kernels, "sliced_linear", lambda *a: used.append(a[0].shape) or real(*a))
    x, w, b = operands((40, 64), out=kernels.SLICED_MIN_OUT)
    with torch.no_grad():
        torch.testing.assert_close(kernels.linear(x, w, b), F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    assert used == [(40, 64)] and set(kernels.measured().values()) == {"sliced"}
