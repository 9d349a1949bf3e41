"""The engine on a CUDA device equals the engine on the CPU: generation (the same tokens, the
draw is on a CPU generator), the shared batch (each row what it gives alone, on the GPU), traces
(lazy equal to eager, both close to the CPU's) and the analyses the pages run on them. Skipped
without a CUDA device; CI has none, so these run where one is lent (see DEVELOPERS.md)."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm import ModelConfig, random_model
from tfm.analysis import attribution
from tfm.analysis.dictionaries import features as FT
from tfm.analysis.heads import head_table
from tfm.analysis.lens.logit import logit_lens
from tfm.generation import choice
from tfm.generation.batcher import BatchConfig, Batcher
from tfm.teach import examples as X

from test_batcher import REQUESTS, VARIANTS, assert_same, batched, solo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def pair(variant: str):
    """The same random model on the CPU and on the GPU."""
    cfg = ModelConfig.preset("tiny").replace(**VARIANTS[variant])
    return random_model(cfg, seed=5), random_model(cfg, seed=5, device="cuda")


@pytest.mark.parametrize("variant", VARIANTS)
def test_generation_on_cuda_gives_the_cpu_tokens(variant):
    cpu, gpu = pair(variant)
    assert next(gpu.model.parameters()).device.type == "cuda"
    for req in REQUESTS:
        on_gpu, on_cpu = solo(gpu, req), solo(cpu, req)
        assert all(s.logits.device.type == "cuda" for s in on_gpu)
        for s in on_gpu:  # the steps' logits stay where the model ran; compare them on the CPU
            object.__setattr__(s, "logits", s.logits.cpu())
        assert_same(on_gpu, on_cpu, tol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("trace", [False, True])
def test_batched_rows_on_cuda_equal_solo_runs(variant, trace):
    _, gpu = pair(variant)
    b = Batcher(gpu, BatchConfig(max_rows=8, per_owner=2))
    got = batched(b, REQUESTS, trace=trace)
    for req, steps in zip(REQUESTS, got):
        assert_same(steps, solo(gpu, req, trace=trace), tol=1e-4)
    assert b.widest >= 2 and b.load() == (0, 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_traces_on_cuda_lazy_equals_eager_and_both_equal_the_cpu(variant):
    cpu, gpu = pair(variant)
    idx = torch.randint(0, cpu.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = cpu.model(idx, trace=True, lazy=False)
        eager = gpu.model(idx.cuda(), trace=True, lazy=False)
        lazy = gpu.model(idx.cuda(), trace=True)
    torch.testing.assert_close(eager.logits.cpu(), want.logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(lazy.logits, eager.logits)
    for name in want.trace.keys():
        assert lazy.trace[name].device.type == "cuda", name
        assert torch.equal(lazy.trace[name], eager.trace[name]), name
        torch.testing.assert_close(eager.trace[name].cpu(), want.trace[name], atol=1e-4, rtol=1e-4, msg=name)


def test_page_analyses_on_cuda_equal_the_cpu():
    """The logit lens, direct attribution (Why this token?) and the head table on a GPU trace."""
    cpu, gpu = pair("rope-gqa")
    ids = cpu.tokenizer.encode("The quick brown fox jumps")
    with torch.no_grad():
        tr_cpu = cpu.model(torch.tensor([ids]), trace=True).trace
        tr_gpu = gpu.model(torch.tensor([ids], device="cuda"), trace=True).trace
    lens_cpu, lens_gpu = (
        logit_lens(lm.model, tr, k=3, n_words=lm.config.vocab_size) for lm, tr in ((cpu, tr_cpu), (gpu, tr_gpu))
    )
    torch.testing.assert_close(lens_gpu.probs.cpu(), lens_cpu.probs, atol=1e-5, rtol=1e-4)
    a_cpu, a_gpu = attribution.direct(cpu, ids), attribution.direct(gpu, ids)
    assert a_gpu.token == a_cpu.token
    torch.testing.assert_close(torch.as_tensor(a_gpu.values).cpu(), torch.as_tensor(a_cpu.values), atol=1e-4, rtol=1e-4)
    h_cpu, h_gpu = head_table(cpu, tr_cpu, ids), head_table(gpu, tr_gpu, ids)
    for key in h_cpu.scores:
        torch.testing.assert_close(h_gpu.scores[key].cpu(), h_cpu.scores[key], atol=1e-4, rtol=1e-4, msg=key)


def test_real_shape_batch_on_cuda_equals_solo_runs(monkeypatch):
    """SmolLM2-135M's shape (30 layers, GQA, 49152 words; random weights): 8 rows at once, the
    sampled ones with their noise drawn ahead on the pool (a vocabulary that large)."""
    pooled, real_pool = [], choice.draw_pool()
    monkeypatch.setattr(choice, "draw_pool", lambda: pooled.append(1) or real_pool)
    lm = tfm.load("random:smollm2-135m", device="cuda")
    reqs = [(f"Student {i} wrote: once upon a time", 6, (0.0, 0.8, 1.2)[i % 3], 0, 1.0, i) for i in range(8)]
    b = Batcher(lm, BatchConfig(max_rows=8, per_owner=8))
    for req, steps in zip(reqs, batched(b, reqs)):
        assert_same(steps, solo(lm, req), tol=1e-4)
    assert b.widest == 8
    assert pooled  # the draw-ahead path ran for CUDA rows


def test_examples_on_cuda_equal_the_cpu():
    """Each page's examples (tfm.teach.examples) on the bundled model and its SAE: the same
    prompts and settings on the GPU, the measured numbers close to the CPU's."""
    cpu, gpu = tfm.load("default", device="cpu"), tfm.load("default", device="cuda")
    fs = FT.bundled(cpu, "default")
    for page in X.PAGES:
        a, b = X.for_page(cpu, page, fs), X.for_page(gpu, page, fs)
        assert [(e.prompt, e.settings) for e in a.measured] == [(e.prompt, e.settings) for e in b.measured], page
        assert [e.score for e in b.measured] == pytest.approx([e.score for e in a.measured], abs=1e-3), page
