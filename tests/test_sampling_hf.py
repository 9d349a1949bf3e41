"""tfm.generation.sampling equals the transformers logits warpers (temperature, top-k, top-p and
their order) on random logits, up to float rounding at the top-p cut."""

from __future__ import annotations

import pytest
import torch

from tests.test_sampling import indices, random_logits
from tfm.generation.sampling import SamplingSettings, apply_temperature, breakdown, filter_mask, top_k_mask, top_p_mask


hf = pytest.importorskip("transformers.generation.logits_process")


# --------------------------------------------------------------------------- #
# Equality with the transformers warpers on random logits
# --------------------------------------------------------------------------- #

N_VECTORS = 240


def _near_top_p_threshold(scores: torch.Tensor, p: float) -> bool:
    """True when some cumulative probability sits within 1e-6 of the top-p cut (float rounding decides)."""
    cum = torch.sort(scores.double()).values.softmax(-1).cumsum(-1)
    return bool(((cum - (1 - p)).abs() < 1e-6).any())


def _hf_pipeline(x: torch.Tensor, t: float, k: int, p: float) -> torch.Tensor:
    """HF order: temperature -> top-k -> top-p, on a (1, V) batch. Returns processed scores (V,)."""
    scores = hf.TemperatureLogitsWarper(float(t))(None, x[None])
    if k > 0:
        scores = hf.TopKLogitsWarper(top_k=k)(None, scores)
    if p < 1.0:
        scores = hf.TopPLogitsWarper(top_p=p)(None, scores)
    return scores[0]


@pytest.mark.parametrize("k", [1, 5, 40, 300])
def test_top_k_matches_hf(k):
    for i in range(0, N_VECTORS, 4):
        x = random_logits(i)
        expected = torch.isfinite(hf.TopKLogitsWarper(top_k=k)(None, x[None])[0])
        assert torch.equal(top_k_mask(x, k), expected), f"vector {i}"


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_matches_hf(p):
    checked = 0
    for i in range(1, N_VECTORS, 4):
        x = random_logits(i)
        if _near_top_p_threshold(x, p):
            continue
        expected = torch.isfinite(hf.TopPLogitsWarper(top_p=p)(None, x[None])[0])
        assert torch.equal(top_p_mask(x, p), expected), f"vector {i}"
        checked += 1
    assert checked >= N_VECTORS // 4 - 5


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_temperature_matches_hf(t):
    for i in range(2, N_VECTORS, 8):
        x = random_logits(i)
        assert torch.equal(apply_temperature(x, t), hf.TemperatureLogitsWarper(t)(None, x[None])[0])


COMBINED = [(0.7, 50, 0.9), (1.3, 0, 0.8), (0.5, 10, 1.0), (2.0, 200, 0.5), (1.0, 3, 0.95)]


@pytest.mark.parametrize("t, k, p", COMBINED)
def test_combined_order_matches_hf(t, k, p):
    checked = 0
    for i in range(3, N_VECTORS, 4):
        x = random_logits(i)
        after_k = hf.TopKLogitsWarper(top_k=k)(None, x[None] / t)[0] if k else x / t
        if p < 1.0 and _near_top_p_threshold(after_k, p):
            continue
        hf_scores = _hf_pipeline(x, t, k, p)
        b = breakdown(x, temperature=t, top_k=k, top_p=p)
        assert torch.equal(filter_mask(x, SamplingSettings(t, k, p)), torch.isfinite(hf_scores)), f"vector {i}"
        assert torch.equal(b.kept, torch.isfinite(hf_scores))
        assert torch.allclose(b.final, hf_scores.softmax(-1), atol=1e-6)
        checked += 1
    assert checked >= N_VECTORS // 4 - 5


def test_top_p_over_full_vocab_not_truncated():
    """A flat tail: top-p=0.9 needs far more than 50 tokens, so a top-50 shortcut would be wrong."""
    x = torch.cat([torch.tensor([3.0]), torch.linspace(0.01, 0.0, 999)])  # distinct values, no ties
    b = breakdown(x, top_p=0.9)
    assert int(b.n_kept) > 50
    assert torch.equal(b.kept, torch.isfinite(hf.TopPLogitsWarper(top_p=0.9)(None, x[None])[0]))


def test_top_p_ties_at_cut_keep_lowest_indices():
    """HF's unstable sort picks arbitrary tied tokens; we keep the lowest indices, and the same count."""
    x = torch.cat([torch.tensor([3.0]), torch.zeros(999)])
    b = breakdown(x, top_p=0.9)
    n_hf = int(torch.isfinite(hf.TopPLogitsWarper(top_p=0.9)(None, x[None])[0]).sum())
    assert int(b.n_kept) == n_hf
    assert indices(b.kept) == set(range(n_hf))
