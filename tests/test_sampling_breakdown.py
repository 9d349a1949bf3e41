"""tfm.generation.sampling.breakdown: its invariants, each stage equal to a computation in full,
known masses, batches equal to rows, half precision, CUDA against the CPU."""

from __future__ import annotations

import math

import pytest
import torch

from tests.test_sampling import logits_for, random_logits
from tfm.generation.sampling import (
    Breakdown,
    SamplingSettings,
    apply_temperature,
    breakdown,
    sample,
    top_k_mask,
    top_p_mask,
)


# --------------------------------------------------------------------------- #
# Breakdown invariants
# --------------------------------------------------------------------------- #

BREAKDOWN_SETTINGS = [(1.0, 0, 1.0), (0.7, 20, 0.9), (1.5, 0, 0.6), (0.2, 5, 1.0), (3.0, 100, 0.3)]


@pytest.mark.parametrize("t, k, p", BREAKDOWN_SETTINGS)
def test_breakdown_invariants(t, k, p):
    for i in range(0, 40, 4):
        x = random_logits(i)
        b = breakdown(x, temperature=t, top_k=k, top_p=p)
        assert isinstance(b, Breakdown) and b.settings == SamplingSettings(t, k, p)
        for field in (b.probs, b.probs_t, b.kept, b.kept_after_top_k, b.final):
            assert field.shape == x.shape
        assert float(b.final.sum()) == pytest.approx(1.0, abs=1e-5)
        assert torch.all(b.final[~b.kept] == 0)
        assert torch.all(b.kept <= b.kept_after_top_k)  # top-p only removes more
        kept_mass = float(b.probs_t[b.kept].sum())
        removed = float(b.mass_removed_top_k) + float(b.mass_removed_top_p)
        assert removed == pytest.approx(1.0 - kept_mass, abs=1e-5)
        assert float(b.mass_removed_top_k) == pytest.approx(float(b.probs_t[~b.kept_after_top_k].sum()), abs=1e-6)
        # final is probs_t renormalised over the kept set
        expected_final = torch.where(b.kept, b.probs_t, 0) / kept_mass
        assert torch.allclose(b.final, expected_final, atol=1e-6)
        # entropies against a direct float64 computation
        lp = torch.log_softmax(x.double(), -1)
        assert float(b.entropy_before) == pytest.approx(float(-(lp.exp() * lp).sum()), rel=1e-4)
        f = expected_final.double()
        direct_after = -(f[f > 0] * f[f > 0].log()).sum()
        assert float(b.entropy_after) == pytest.approx(float(direct_after), rel=1e-4, abs=1e-6)
        assert int(b.n_kept) == int(b.kept.sum())


@pytest.mark.parametrize(
    "t, k, p", [(1.0, 0, 1.0), (0.8, 0, 1.0), (1.0, 7, 1.0), (1.0, 0, 0.8), (0.0, 0, 1.0), (0.7, 20, 0.9)]
)
def test_breakdown_equals_each_stage_computed_in_full(t, k, p):
    """The reuses that make breakdown cheap (x / 1 is x; with nothing filtered every mask is all
    True, every cut mass 0, log_final the log_softmax) give the stage-by-stage values bit for bit."""
    x = torch.randn(3, 500, generator=torch.Generator().manual_seed(3)) * 4
    x[1, 450:] = -math.inf  # padded rows, as next_token masks them
    b = breakdown(x, temperature=t, top_k=k, top_p=p)
    scaled = apply_temperature(x, t)
    kept_k = (
        torch.zeros_like(x, dtype=torch.bool).scatter_(-1, scaled.argmax(-1, keepdim=True), True)
        if t == 0
        else top_k_mask(scaled, k)
    )
    kept = kept_k if t == 0 else kept_k & top_p_mask(scaled.masked_fill(~kept_k, -math.inf), p)
    probs_t = kept.float() if t == 0 else scaled.softmax(-1)
    log_final = torch.log_softmax(scaled.masked_fill(~kept, -math.inf), -1)

    def ent(lp):
        q = lp.exp()
        return -torch.where(q > 0, q * lp, torch.zeros_like(q)).sum(-1)

    want = dict(
        probs=x.softmax(-1),
        probs_t=probs_t,
        kept_after_top_k=kept_k,
        kept=kept,
        final=log_final.exp(),
        mass_removed_top_k=torch.where(kept_k, torch.zeros_like(probs_t), probs_t).sum(-1),
        mass_removed_top_p=torch.where(kept_k & ~kept, probs_t, torch.zeros_like(probs_t)).sum(-1),
        entropy_before=ent(torch.log_softmax(x, -1)),
        entropy_after=ent(log_final),
        n_kept=kept.sum(-1),
    )
    for name, value in want.items():
        got = getattr(b, name)
        assert got.dtype == value.dtype and torch.equal(got, value), name
    assert b.kept is not b.kept_after_top_k or t == 0  # two fields, two tensors


def test_breakdown_masses_known_values():
    b = breakdown(logits_for(0.4, 0.3, 0.2, 0.1), top_k=3, top_p=0.5)
    # top-k=3 drops 0.1; renormalised 4/9, 3/9, 2/9: p=0.5 keeps {0, 1}; top-p drops 0.2
    assert float(b.mass_removed_top_k) == pytest.approx(0.1, abs=1e-6)
    assert float(b.mass_removed_top_p) == pytest.approx(0.2, abs=1e-6)
    assert torch.allclose(b.final, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=1e-6)


def test_breakdown_entropy_finite_with_zero_probabilities():
    x = torch.tensor([0.0, -1000.0, -math.inf, 1.0])  # underflowing and masked tokens
    b = breakdown(x)
    assert torch.isfinite(b.entropy_before) and torch.isfinite(b.entropy_after)
    assert float(b.entropy_before) == pytest.approx(float(b.entropy_after))


def test_breakdown_batch_matches_rows():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 400, generator=g) * 3
    b = breakdown(x, temperature=0.8, top_k=30, top_p=0.7)
    assert b.final.shape == (3, 400) and b.n_kept.shape == (3,) and b.entropy_after.shape == (3,)
    for r in range(3):
        row = breakdown(x[r], temperature=0.8, top_k=30, top_p=0.7)
        assert torch.equal(b.kept[r], row.kept)
        assert torch.allclose(b.final[r], row.final)
        assert torch.allclose(b.mass_removed_top_p[r], row.mass_removed_top_p)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(5)) * 4).to(dtype)
    b = breakdown(x, temperature=0.9, top_k=100, top_p=0.9)
    ref = breakdown(x.float(), temperature=0.9, top_k=100, top_p=0.9)
    assert b.final.dtype == torch.float32 and b.probs.dtype == torch.float32
    assert torch.equal(b.kept, ref.kept)
    assert torch.equal(b.final, ref.final)
    s = SamplingSettings(0.9, 100, 0.9)
    assert sample(x, s, torch.Generator().manual_seed(1)) == sample(x.float(), s, torch.Generator().manual_seed(1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    x = torch.randn(2000, generator=torch.Generator().manual_seed(9)) * 3
    s = SamplingSettings(0.8, 200, 0.9)
    b_cpu, b_gpu = breakdown(x, settings=s), breakdown(x.cuda().half(), settings=s)
    assert b_gpu.final.device.type == "cuda"
    assert torch.equal(b_gpu.kept.cpu(), breakdown(x.half(), settings=s).kept)
    assert int(b_cpu.n_kept) > 1
    g_cuda = torch.Generator(device="cuda").manual_seed(0)
    tok = sample(x.cuda(), s, g_cuda)
    assert b_cpu.kept[tok]
    # a CPU generator gives the same token whatever device made the logits
    assert sample(x.cuda(), s, torch.Generator().manual_seed(4)) == sample(x, s, torch.Generator().manual_seed(4))


def test_breakdown_rejects_settings_and_loose_args_together():
    with pytest.raises(ValueError):
        breakdown(torch.zeros(3), temperature=0.5, settings=SamplingSettings())
