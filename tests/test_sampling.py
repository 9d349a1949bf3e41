"""tfm.generation.sampling: the edge-case table (kept sets, ties, extreme temperatures), settings and
logits refused with what is allowed, and the one pipeline generation and the Next token page share.
Equality with the transformers warpers: test_sampling_hf.py; the breakdown: test_sampling_breakdown.py;
drawing with generators: test_sampling_rng.py."""

from __future__ import annotations

import math

import pytest
import torch

from tfm.generation.sampling import (
    SamplingSettings,
    apply_temperature,
    breakdown,
    filter_mask,
    sample,
    top_k_mask,
    top_p_mask,
)

hf = pytest.importorskip("transformers.generation.logits_process")


def indices(mask: torch.Tensor) -> set[int]:
    return set(torch.nonzero(mask).flatten().tolist())


def logits_for(*probs: float) -> torch.Tensor:
    """Logits whose softmax is exactly the given (normalised) probabilities."""
    return torch.tensor(probs, dtype=torch.float64).log().to(torch.float32)


def random_logits(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    vocab = int(torch.randint(50, 5001, (1,), generator=g))
    scale = float(torch.empty(1).uniform_(0.3, 6.0, generator=g))
    return torch.randn(vocab, generator=g) * scale


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
    ("top_p_keeps_crossing_token", logits_for(0.5, 0.3, 0.2), SamplingSettings(top_p=0.6), {0, 1}),
    ("top_p_crossing_token_unsorted", logits_for(0.2, 0.5, 0.3), SamplingSettings(top_p=0.6), {1, 2}),
    ("top_p_first_token_crosses", logits_for(0.5, 0.3, 0.2), SamplingSettings(top_p=0.4), {0}),
    ("top_p_needs_all", logits_for(0.5, 0.3, 0.2), SamplingSettings(top_p=0.9), {0, 1, 2}),
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
    ("k_then_p_renormalised", logits_for(0.4, 0.3, 0.2, 0.1), SamplingSettings(top_k=2, top_p=0.6), {0, 1}),
    # after top-k=2 the renormalised probs are 4/7, 3/7: p=0.5 is reached by the first token alone
    ("k_then_p_uses_renormalised", logits_for(0.4, 0.3, 0.2, 0.1), SamplingSettings(top_k=2, top_p=0.5), {0}),
]


@pytest.mark.parametrize("logits, settings, expected", [c[1:] for c in EDGE_CASES], ids=[c[0] for c in EDGE_CASES])
def test_edge_cases_kept_set(logits, settings, expected):
    assert indices(filter_mask(logits, settings)) == expected
    b = breakdown(logits, settings=settings)
    assert indices(b.kept) == expected
    assert int(b.n_kept) == len(expected)


@pytest.mark.parametrize(
    "logits, k", [(torch.tensor([3.0, 2.0, 2.0, 1.0]), 2), (torch.tensor([1.0, 4.0, 1.0, 1.0, 0.0]), 3)]
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
    x[0, :100] = -math.inf  # masked tokens are fine
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
    logits[50:] += 10.0  # padding rows would win if drawn
    s = SamplingSettings(0.9, 20, 0.95)
    bd = next_token(logits, s, 50)
    assert bd.kept[50:].sum() == 0 and bd.final[50:].sum() == 0
    assert torch.isinf(bd.logits[50:]).all() and torch.equal(bd.logits[:50], logits[:50])
    assert torch.isfinite(logits).all()  # the input is not written to
    ref = breakdown(mask_padding(logits, 50), settings=s)
    torch.testing.assert_close(bd.final, ref.final, rtol=0, atol=0)
    for seed in range(5):
        want = sample(mask_padding(logits, 50), s, torch.Generator().manual_seed(seed))
        assert draw(bd, torch.Generator().manual_seed(seed)) == want
    assert draw(next_token(logits, SamplingSettings(0.0), 50), torch.Generator()) == int(logits[:50].argmax())
    assert mask_padding(logits, 60) is logits
