"""tfm.generation.choice's draw against torch.multinomial, the draw Hugging Face makes: the same token and
the same generator state afterwards, for many distributions and seeds, so drawing the noise ahead
(the batcher) cannot change what a row samples."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tfm.generation.choice import draw_with, exp_noise


def distributions(v: int, n: int) -> list[torch.Tensor]:
    """Peaked and flat softmaxes, rows with most entries cut to exact zeros (top-k / top-p), a
    one-hot row and exact ties."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        p = torch.softmax(torch.randn(v, generator=g) * (0.1 + 8 * torch.rand(1, generator=g)), -1)
        if i % 3 == 1:  # the most likely entry is always kept, as top-k and top-p keep it
            p = torch.where((torch.rand(v, generator=g) < 0.95) & (p < p.max()), 0.0, p)
        if i % 7 == 2:
            p = torch.zeros(v)
            p[i % v] = 1.0
        if i % 5 == 3:
            p = torch.full((v,), 1.0 / v)
        out.append(p)
    return out


@pytest.mark.parametrize("v", [7, 4096, 49152])
def test_noise_drawn_ahead_gives_multinomials_token_and_generator_state(v):
    rows = distributions(v, 24)
    with ThreadPoolExecutor(2) as pool:  # drawn in threads, before the "forward", as the batcher does
        for seed in range(3):
            mine = [torch.Generator().manual_seed(seed * 100 + i) for i in range(len(rows))]
            theirs = [torch.Generator().manual_seed(seed * 100 + i) for i in range(len(rows))]
            futures = [pool.submit(exp_noise, v, g) for g in mine]
            ids = draw_with(torch.stack(rows), torch.stack([f.result() for f in futures]))
            want = [int(torch.multinomial(p.reshape(1, -1), 1, generator=g)) for p, g in zip(rows, theirs)]
            assert ids.tolist() == want
            for a, b in zip(mine, theirs):
                assert torch.equal(a.get_state(), b.get_state())


def test_zero_probability_is_never_drawn_and_nan_is_left_to_multinomial():
    p = torch.zeros(2, 1000)
    p[:, 10], p[:, 900] = 0.25, 0.75
    noise = torch.stack([exp_noise(1000, torch.Generator().manual_seed(s)) for s in range(2)])
    assert set(draw_with(p, noise).tolist()) <= {10, 900}
    p[1, 5] = float("nan")
    assert draw_with(p, noise) is None
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        torch.multinomial(p[1:], 1, generator=torch.Generator().manual_seed(1))
