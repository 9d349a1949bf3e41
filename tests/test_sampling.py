"""Tests for tfm.sampling: edge cases, equality with the transformers warpers, breakdown, sampling RNG."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from tfm.generation.sampling import Breakdown, SamplingSettings, apply_temperature, breakdown, filter_mask, sample, top_k_mask, top_p_mask

hf = pytest.importorskip("transformers.generation.logits_process")


def _idx(mask: torch.Tensor) -> set[int]:
    return set(torch.nonzero(mask).flatten().tolist())


def _logp(*probs: float) -> torch.Tensor:
    """Logits whose softmax is exactly the given (normalised) probabilities."""
    return torch.tensor(probs, dtype=torch.float64).log().to(torch.float32)


# --------------------------------------------------------------------------- #
# Edge-case table
# --------------------------------------------------------------------------- #

EDGE_CASES = [
    # id, logits, settings, expected kept indices
    ("tie_at_kth_keeps_all_tied", torch.tensor([3.0, 2.0, 2.0, 1.0]), SamplingSettings(top_k=2), {0, 1, 2}),
    ("tie_at_kth_three_way", torch.tensor([1.0, 4.0, 1.0, 1.0, 0.0]), SamplingSettings(top_k=3), {0, 1, 2, 3}),
    ("k1_keeps_argmax", torch.tensor([1.0, 5.0, 2.0, 4.9]), SamplingSettings(top_k=1), {1}),
    ("k_above_vocab_clamped", torch.tensor([1.0, 5.0, 2.0]), SamplingSettings(top_k=10), {0, 1, 2}),
    ("k_equals_vocab", torch.tensor([1.0, 5.0, 2.0]), SamplingSettings(top_k=3), {0, 1, 2}),
    # probs 0.5, 0.3, 0.2: 0.5 < 0.6, so the 0.3 token crosses the threshold and is kept
    ("top_p_keeps_crossing_token", _logp(0.5, 0.3, 0.2), SamplingSettings(top_p=0.6), {0, 1}),
    ("top_p_crossing_token_unsorted", _logp(0.2, 0.5, 0.3), SamplingSettings(top_p=0.6), {1, 2}),
    ("top_p_first_token_crosses", _logp(0.5, 0.3, 0.2), SamplingSettings(top_p=0.4), {0}),
    ("top_p_needs_all", _logp(0.5, 0.3, 0.2), SamplingSettings(top_p=0.9), {0, 1, 2}),
    # exactly representable probabilities (0.25 each): reaching p exactly stops the set there
    ("top_p_reached_exactly_stops", torch.zeros(4), SamplingSettings(top_p=0.5), {0, 1}),
    ("top_p_reached_exactly_by_top", torch.zeros(2), SamplingSettings(top_p=0.5), {0}),
    ("p0_keeps_one", torch.tensor([1.0, 5.0, 2.0]), SamplingSettings(top_p=0.0), {1}),
    ("p0_tie_keeps_lowest_index", torch.tensor([1.0, 5.0, 5.0]), SamplingSettings(top_p=0.0), {1}),
    ("p_tiny_keeps_one", torch.tensor([0.0, 0.0, 0.0, 0.0]), SamplingSettings(top_p=1e-6), {0}),
    ("greedy", torch.tensor([1.0, 5.0, 2.0]), SamplingSettings(temperature=0.0), {1}),
    ("greedy_tie_lowest_index", torch.tensor([1.0, 5.0, 5.0, 2.0]), SamplingSettings(temperature=0.0), {1}),
    ("greedy_ignores_k_p", torch.tensor([1.0, 5.0, 4.0]), SamplingSettings(0.0, top_k=3, top_p=0.99), {1}),
    # p=1 and k=0 are off: every token survives, even one whose probability underflows to 0
    ("p1_k0_off", torch.tensor([0.0, -200.0, -1000.0]), SamplingSettings(top_k=0, top_p=1.0), {0, 1, 2}),
    ("k_then_p_renormalised", _logp(0.4, 0.3, 0.2, 0.1), SamplingSettings(top_k=2, top_p=0.6), {0, 1}),
    # after top-k=2 the renormalised probs are 4/7, 3/7: p=0.5 is reached by the first token alone
    ("k_then_p_uses_renormalised", _logp(0.4, 0.3, 0.2, 0.1), SamplingSettings(top_k=2, top_p=0.5), {0}),
]


@pytest.mark.parametrize("logits, settings, expected", [c[1:] for c in EDGE_CASES], ids=[c[0] for c in EDGE_CASES])
def test_edge_cases_kept_set(logits, settings, expected):
    assert _idx(filter_mask(logits, settings)) == expected
    b = breakdown(logits, settings=settings)
    assert _idx(b.kept) == expected
    assert int(b.n_kept) == len(expected)


@pytest.mark.parametrize(
    "logits, k",
    [(torch.tensor([3.0, 2.0, 2.0, 1.0]), 2), (torch.tensor([1.0, 4.0, 1.0, 1.0, 0.0]), 3)],
)
def test_ties_at_kth_match_hf(logits, k):
    hf_out = hf.TopKLogitsWarper(top_k=k)(None, logits[None])[0]
    assert torch.equal(top_k_mask(logits, k), torch.isfinite(hf_out))


@pytest.mark.parametrize("n, p", [(4, 0.5), (2, 0.5), (4, 0.75), (8, 0.25)])
def test_exact_threshold_count_matches_hf(n, p):
    x = torch.zeros(n)  # uniform, exactly representable cumulative sums
    n_hf = int(torch.isfinite(hf.TopPLogitsWarper(top_p=p)(None, x[None])[0]).sum())
    assert int(top_p_mask(x, p).sum()) == n_hf == round(n * p)


def test_greedy_temperature_returns_logits_unchanged():
    x = torch.tensor([1.0, -2.0, 3.0])
    assert torch.equal(apply_temperature(x, 0), x)
    assert torch.equal(apply_temperature(x, 2.0), x / 2)


def test_temperature_0_01_nearly_one_hot_and_finite():
    x = torch.tensor([2.0, 1.9, -3.0, 0.5])
    b = breakdown(x, temperature=0.01)
    assert b.probs_t[0] > 0.9999
    assert b.final[0] > 0.9999
    for value in (b.entropy_before, b.entropy_after, b.mass_removed_top_k, b.mass_removed_top_p):
        assert torch.isfinite(value)
    assert 0 <= float(b.entropy_after) < 1e-3
    assert torch.isfinite(b.final).all() and torch.isfinite(b.probs_t).all()


def test_temperature_0_01_entropy_matches_float64():
    x = torch.randn(300, generator=torch.Generator().manual_seed(3)) * 0.02  # close logits: mass spread at T=0.01
    b = breakdown(x, temperature=0.01)
    logp = torch.log_softmax(x.double() / 0.01, dim=-1)
    expected = -(logp.exp() * logp).sum()
    assert float(b.entropy_after) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_temperature_100_nearly_uniform():
    x = torch.tensor([5.0, 1.0, -3.0, 0.0, 2.0])
    b = breakdown(x, temperature=100.0)
    assert torch.allclose(b.probs_t, torch.full((5,), 0.2), atol=0.01)
    assert float(b.entropy_after) == pytest.approx(math.log(5), abs=1e-3)
    assert float(b.entropy_before) < math.log(5) - 0.3  # the raw distribution is not uniform


def test_greedy_breakdown_one_hot():
    x = torch.tensor([1.0, 5.0, 5.0, 2.0])
    b = breakdown(x, temperature=0.0, top_k=2, top_p=0.5)
    one_hot = torch.tensor([0.0, 1.0, 0.0, 0.0])
    assert torch.equal(b.probs_t, one_hot) and torch.equal(b.final, one_hot)
    assert float(b.entropy_after) == 0.0
    assert float(b.mass_removed_top_k) == 0.0 and float(b.mass_removed_top_p) == 0.0


BAD_SETTINGS = [
    dict(temperature=-0.1),
    dict(temperature=float("nan")),
    dict(temperature=float("inf")),
    dict(top_k=-1),
    dict(top_k=2.5),
    dict(top_p=-0.01),
    dict(top_p=1.01),
    dict(top_p=float("nan")),
]


@pytest.mark.parametrize("kwargs", BAD_SETTINGS, ids=[str(k) for k in BAD_SETTINGS])
def test_bad_settings_raise(kwargs):
    with pytest.raises(ValueError):
        SamplingSettings(**kwargs)
    with pytest.raises(ValueError):
        breakdown(torch.zeros(3), **kwargs)


def test_error_messages_say_the_allowed_range():
    with pytest.raises(ValueError, match=">= 0"):
        SamplingSettings(temperature=-1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        SamplingSettings(top_p=2)
    with pytest.raises(ValueError, match="0 turns top-k off"):
        SamplingSettings(top_k=-3)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: apply_temperature(x, -1.0),
        lambda x: top_k_mask(x, -1),
        lambda x: top_p_mask(x, 1.5),
        lambda x: top_p_mask(x, -0.5),
    ],
    ids=["negative_T", "negative_k", "p_above_1", "p_below_0"],
)
def test_bad_function_args_raise(call):
    with pytest.raises(ValueError):
        call(torch.zeros(4))


@pytest.mark.parametrize(
    "logits",
    [torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("inf")]), torch.full((3,), -math.inf)],
    ids=["nan", "posinf", "all_neg_inf"],
)
def test_bad_logits_raise(logits):
    with pytest.raises(ValueError):
        breakdown(logits)


@pytest.mark.parametrize("bad", ["nan", "posinf", "all_neg_inf"])
@pytest.mark.parametrize("where", [0, 17, 4095])
def test_one_bad_row_among_good_rows_raises(bad, where):
    """The check reads each row's max: one bad value anywhere in one row of a batch is found."""
    x = torch.randn(3, 4096, generator=torch.Generator().manual_seed(where))
    x[0, :100] = -math.inf                                               # masked tokens are fine
    breakdown(x)
    if bad == "all_neg_inf":
        x[1] = -math.inf
    else:
        x[1, where] = float("nan") if bad == "nan" else math.inf
    with pytest.raises(ValueError):
        breakdown(x)


def test_settings_defaults_and_greedy():
    s = SamplingSettings()
    assert (s.temperature, s.top_k, s.top_p) == (1.0, 0, 1.0)
    assert not s.greedy and SamplingSettings(temperature=0).greedy
    with pytest.raises(Exception):
        s.temperature = 2.0  # frozen


# --------------------------------------------------------------------------- #
# Equality with the transformers warpers on random logits
# --------------------------------------------------------------------------- #

N_VECTORS = 240


def _random_logits(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    vocab = int(torch.randint(50, 5001, (1,), generator=g))
    scale = float(torch.empty(1).uniform_(0.3, 6.0, generator=g))
    return torch.randn(vocab, generator=g) * scale


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
        x = _random_logits(i)
        expected = torch.isfinite(hf.TopKLogitsWarper(top_k=k)(None, x[None])[0])
        assert torch.equal(top_k_mask(x, k), expected), f"vector {i}"


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_matches_hf(p):
    checked = 0
    for i in range(1, N_VECTORS, 4):
        x = _random_logits(i)
        if _near_top_p_threshold(x, p):
            continue
        expected = torch.isfinite(hf.TopPLogitsWarper(top_p=p)(None, x[None])[0])
        assert torch.equal(top_p_mask(x, p), expected), f"vector {i}"
        checked += 1
    assert checked >= N_VECTORS // 4 - 5


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_temperature_matches_hf(t):
    for i in range(2, N_VECTORS, 8):
        x = _random_logits(i)
        assert torch.equal(apply_temperature(x, t), hf.TemperatureLogitsWarper(t)(None, x[None])[0])


COMBINED = [(0.7, 50, 0.9), (1.3, 0, 0.8), (0.5, 10, 1.0), (2.0, 200, 0.5), (1.0, 3, 0.95)]


@pytest.mark.parametrize("t, k, p", COMBINED)
def test_combined_order_matches_hf(t, k, p):
    checked = 0
    for i in range(3, N_VECTORS, 4):
        x = _random_logits(i)
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
    assert _idx(b.kept) == set(range(n_hf))


# --------------------------------------------------------------------------- #
# Breakdown invariants
# --------------------------------------------------------------------------- #

BREAKDOWN_SETTINGS = [(1.0, 0, 1.0), (0.7, 20, 0.9), (1.5, 0, 0.6), (0.2, 5, 1.0), (3.0, 100, 0.3)]


@pytest.mark.parametrize("t, k, p", BREAKDOWN_SETTINGS)
def test_breakdown_invariants(t, k, p):
    for i in range(0, 40, 4):
        x = _random_logits(i)
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


@pytest.mark.parametrize("t, k, p", [(1.0, 0, 1.0), (0.8, 0, 1.0), (1.0, 7, 1.0), (1.0, 0, 0.8), (0.0, 0, 1.0),
                                     (0.7, 20, 0.9)])
def test_breakdown_equals_each_stage_computed_in_full(t, k, p):
    """The reuses that make breakdown cheap (x / 1 is x; with nothing filtered every mask is all
    True, every cut mass 0, log_final the log_softmax) give the stage-by-stage values bit for bit."""
    x = torch.randn(3, 500, generator=torch.Generator().manual_seed(3)) * 4
    x[1, 450:] = -math.inf                                                # padded rows, as next_token masks them
    b = breakdown(x, temperature=t, top_k=k, top_p=p)
    scaled = apply_temperature(x, t)
    kept_k = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, scaled.argmax(-1, keepdim=True), True) if t == 0 \
        else top_k_mask(scaled, k)
    kept = kept_k if t == 0 else kept_k & top_p_mask(scaled.masked_fill(~kept_k, -math.inf), p)
    probs_t = kept.float() if t == 0 else scaled.softmax(-1)
    log_final = torch.log_softmax(scaled.masked_fill(~kept, -math.inf), -1)

    def ent(lp):
        q = lp.exp()
        return -torch.where(q > 0, q * lp, torch.zeros_like(q)).sum(-1)
    want = dict(probs=x.softmax(-1), probs_t=probs_t, kept_after_top_k=kept_k, kept=kept, final=log_final.exp(),
                mass_removed_top_k=torch.where(kept_k, torch.zeros_like(probs_t), probs_t).sum(-1),
                mass_removed_top_p=torch.where(kept_k & ~kept, probs_t, torch.zeros_like(probs_t)).sum(-1),
                entropy_before=ent(torch.log_softmax(x, -1)), entropy_after=ent(log_final), n_kept=kept.sum(-1))
    for name, value in want.items():
        got = getattr(b, name)
        assert got.dtype == value.dtype and torch.equal(got, value), name
    assert b.kept is not b.kept_after_top_k or t == 0                     # two fields, two tensors


def test_breakdown_masses_known_values():
    b = breakdown(_logp(0.4, 0.3, 0.2, 0.1), top_k=3, top_p=0.5)
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


# --------------------------------------------------------------------------- #
# Sampling
# --------------------------------------------------------------------------- #

SPREAD = torch.tensor([0.5, 0.2, 0.0, -0.3, 1.0, 0.1, -2.0, 0.4])
SPREAD_SETTINGS = SamplingSettings(temperature=1.2, top_k=6, top_p=0.9)


def _draws(seed: int, n: int = 200, settings: SamplingSettings = SPREAD_SETTINGS) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [sample(SPREAD, settings, g) for _ in range(n)]


def test_sample_returns_int_for_1d():
    tok = sample(SPREAD, SPREAD_SETTINGS, torch.Generator().manual_seed(0))
    assert isinstance(tok, int) and 0 <= tok < len(SPREAD)


def test_sample_reproducible_with_same_seed():
    assert _draws(123) == _draws(123)


def test_sample_differs_with_different_seeds():
    a, b = _draws(1), _draws(2)
    assert a != b
    assert sum(x != y for x, y in zip(a, b)) > 50  # not merely an offset of one draw


def test_sample_uses_the_given_generator():
    b = breakdown(SPREAD, settings=SPREAD_SETTINGS)
    expected = torch.multinomial(b.final, 1, generator=torch.Generator().manual_seed(77))
    assert sample(SPREAD, SPREAD_SETTINGS, torch.Generator().manual_seed(77)) == int(expected)


def test_sample_frequencies_match_final():
    n = 40_000
    b = breakdown(SPREAD, settings=SPREAD_SETTINGS)
    draws = sample(SPREAD.expand(n, -1), SPREAD_SETTINGS, torch.Generator().manual_seed(2024))
    assert draws.shape == (n,)
    counts = torch.bincount(draws, minlength=len(SPREAD)).double()
    assert torch.all(counts[~b.kept] == 0), "drew a removed token"
    expected = b.final.double()[b.kept] * n
    chi2 = float(((counts[b.kept] - expected) ** 2 / expected).sum())
    dof = int(b.n_kept) - 1
    assert dof >= 2
    assert chi2 < dof + 6 * math.sqrt(2 * dof) + 5  # far beyond the 99.99th percentile


def test_greedy_does_not_advance_generator():
    g = torch.Generator().manual_seed(5)
    before = g.get_state()
    for _ in range(5):
        assert sample(torch.tensor([1.0, 3.0, 3.0, 2.0]), SamplingSettings(temperature=0), g) == 1
    assert torch.equal(g.get_state(), before)


def test_sampling_advances_only_its_generator():
    g = torch.Generator().manual_seed(5)
    before = g.get_state()
    sample(SPREAD, SPREAD_SETTINGS, g)
    assert not torch.equal(g.get_state(), before)


def test_global_rng_untouched():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    g = torch.Generator().manual_seed(3)
    sample(SPREAD, SPREAD_SETTINGS, g)
    sample(SPREAD.expand(10, -1), SPREAD_SETTINGS, g)
    sample(SPREAD, SamplingSettings(temperature=0), g)
    breakdown(SPREAD, settings=SPREAD_SETTINGS)
    assert torch.equal(torch.get_rng_state(), state)


def test_sample_requires_a_generator():
    with pytest.raises(TypeError):
        sample(SPREAD, SPREAD_SETTINGS, None)


def test_interleaved_generators_do_not_share_state():
    g1, g2 = torch.Generator().manual_seed(10), torch.Generator().manual_seed(11)
    inter1, inter2 = [], []
    for _ in range(100):
        inter1.append(sample(SPREAD, SPREAD_SETTINGS, g1))
        inter2.append(sample(SPREAD, SPREAD_SETTINGS, g2))
    assert inter1 == _draws(10, 100) and inter2 == _draws(11, 100)


def test_threads_with_own_generators_match_serial():
    seeds = [31, 32, 33, 34]
    serial = {s: _draws(s, 150) for s in seeds}
    results: dict[int, list[int]] = {}
    barrier = threading.Barrier(len(seeds))

    def worker(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        barrier.wait()  # start together so the draws interleave
        results[seed] = [sample(SPREAD, SPREAD_SETTINGS, g) for _ in range(150)]

    threads = [threading.Thread(target=worker, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == serial


# --------------------------------------------------------------------------- #
# The one pipeline of generation and the next-token page
# --------------------------------------------------------------------------- #


def test_usable_settings_clamps_link_values_and_refuses_non_numbers():
    from tfm.generation.sampling import usable_settings
    assert usable_settings(float("nan"), -3, 1.5, 100) == SamplingSettings(1.0, 0, 1.0)
    assert usable_settings(-2, 10**9, -0.1, 100) == SamplingSettings(1.0, 100, 1.0)
    assert usable_settings("0.5", "7", 0.25, 100) == SamplingSettings(0.5, 7, 0.25)
    with pytest.raises(ValueError, match="must be numbers"):
        usable_settings("hot", 0, 1.0, 100)


def test_next_token_masks_padding_rows_and_draw_matches_sample():
    from tfm.generation.sampling import draw, mask_padding, next_token
    logits = torch.randn(60, generator=torch.Generator().manual_seed(3))
    logits[50:] += 10.0                                                    # padding rows would win if drawn
    s = SamplingSettings(0.9, 20, 0.95)
    bd = next_token(logits, s, 50)
    assert bd.kept[50:].sum() == 0 and bd.final[50:].sum() == 0
    assert torch.isinf(bd.logits[50:]).all() and torch.equal(bd.logits[:50], logits[:50])
    assert torch.isfinite(logits).all()                                    # the input is not written to
    ref = breakdown(mask_padding(logits, 50), settings=s)
    torch.testing.assert_close(bd.final, ref.final, rtol=0, atol=0)
    for seed in range(5):
        want = sample(mask_padding(logits, 50), s, torch.Generator().manual_seed(seed))
        assert draw(bd, torch.Generator().manual_seed(seed)) == want
    assert draw(next_token(logits, SamplingSettings(0.0), 50), torch.Generator()) == int(logits[:50].argmax())
    assert mask_padding(logits, 60) is logits
