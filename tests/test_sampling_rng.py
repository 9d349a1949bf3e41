"""tfm.generation.sampling.sample: draws follow the final distribution, come from the given
generator only (never the global one), and threads with their own generators match serial draws."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from tfm.generation.sampling import SamplingSettings, breakdown, sample


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
