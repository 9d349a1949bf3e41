"""How a batch's rows choose their tokens: one sampling breakdown for the rows that share
settings, then each row's own draw from its own generator, as `tfm.generate` draws alone.

Hugging Face samples with `torch.multinomial(probs, 1, generator=g)`. For one draw torch computes
argmax(probs / q), q ~ Exp(1) over the whole vocabulary from g (torch's own fast path for one
sample; tests/test_choice.py checks the token and g's state after it against multinomial). On a
49152-token vocabulary that noise is nearly all of a draw's time, and a 30-row SmolLM2 step
spent a large share of its time on it after its forward (docs/benchmarks.md). q does not depend on the probabilities, so a large
vocabulary's rows have it drawn ahead (`Noise.start`) in threads while the step's forward runs
(torch releases the GIL inside the op), from the row's own generator in the order a draw after
the forward would use it: the same numbers, so the same token. A small vocabulary's draw (4096
ids) costs less than handing it to another thread: those draw after the forward.

A row is any object with `settings` (SamplingSettings), `words` (ids that are tokens), `gen` (its
torch.Generator) and `noise` (its Noise).
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields

import torch

from .sampling import Breakdown, SamplingSettings, draw, next_token

__all__ = ["AHEAD_VOCAB", "Noise", "exp_noise", "draw_with", "choose_all"]

AHEAD_VOCAB = 16384  # entries per row from which noise is drawn ahead

_BREAKDOWN_TENSORS = tuple(f.name for f in fields(Breakdown) if f.name != "settings")


@functools.cache
def draw_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads()), thread_name_prefix="tfm-draw")


def exp_noise(n: int, generator: torch.Generator) -> torch.Tensor:
    """(n,) Exp(1) noise from `generator`: what multinomial draws for one sample over n entries."""
    return torch.empty(n, dtype=torch.float32, device=generator.device).exponential_(1, generator=generator)


def draw_with(final: torch.Tensor, noise: torch.Tensor) -> torch.Tensor | None:
    """(G,) token ids: for each row, what torch.multinomial(final[g], 1, generator) gives when
    that generator's noise is noise[g]. None if a row holds NaN (then multinomial itself must
    run, to raise its own error)."""
    final = final.to(noise.device, torch.float32)  # (G, V)
    if torch.isnan(final).any():
        return None
    return (final / noise).argmax(dim=-1)  # (G,)


class Noise:
    """One row's next draw's noise, drawn ahead in `draw_pool()`; its generator is not used
    while a draw is pending."""

    def __init__(self) -> None:
        self._pending: Future | None = None

    def start(self, width: int, settings: SamplingSettings, generator: torch.Generator) -> None:
        """Start drawing (a sampled row of a large vocabulary only; once per step)."""
        if self._pending is None and width >= AHEAD_VOCAB and not settings.greedy:
            self._pending = draw_pool().submit(exp_noise, width, generator)

    def take(self, width: int) -> torch.Tensor | None:
        """The noise drawn ahead for this step, or None if none was started."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        noise = pending.result()
        if noise.shape[-1] != width:
            raise RuntimeError(f"noise was drawn for {noise.shape[-1]} entries; the logits have {width}")
        return noise


@torch.no_grad()
def choose_rows(logits: torch.Tensor, rows: list) -> list[tuple]:
    """`decode.choose` for rows with the same settings at once: one breakdown of their (G, V)
    logits (per-row ops on a large vocabulary were most of a wide step), then each row's own
    draw with its own generator. Per row: (its Breakdown, token, [prob, rank, prob0, rank0, kept])."""
    bd = next_token(logits, rows[0].settings, rows[0].words)  # fields (G, V) / (G,)
    cols = [(f, getattr(bd, f).unbind(0)) for f in _BREAKDOWN_TENSORS]  # one op per field, not one per row
    parts = [Breakdown(**{f: col[g] for f, col in cols}, settings=bd.settings) for g in range(len(rows))]
    width = logits.shape[-1]
    ahead = [r.noise.take(width) for r in rows]
    ids = None
    if any(q is not None for q in ahead):  # a row without noise yet draws it now, from its own generator
        ids = draw_with(
            bd.final, torch.stack([exp_noise(width, r.gen) if q is None else q for q, r in zip(ahead, rows)])
        )  # (G, V) noise
    if ids is None:  # drawn here: greedy, a small vocabulary, or NaN (multinomial raises its own error)
        ids = torch.tensor([draw(part, r.gen) for part, r in zip(parts, rows)])
    tokens = ids.to(logits.device)[:, None]  # (G, 1)
    above = bd.logits > bd.logits.gather(-1, tokens)  # (G, V)
    numbers = torch.stack(
        [
            bd.final.gather(-1, tokens)[:, 0].double(),
            (above & bd.kept).sum(-1).double(),
            bd.probs.gather(-1, tokens)[:, 0].double(),
            above.sum(-1).double(),
            bd.n_kept.double(),
        ],
        dim=1,
    ).tolist()  # (G, 5)
    return [(part, int(t), n) for part, t, n in zip(parts, tokens[:, 0].tolist(), numbers)]


def choose_all(logits: torch.Tensor, rows: list) -> list[tuple]:
    """Each row's choice from its row of (B, V) logits, grouped by sampling settings."""
    groups: dict[SamplingSettings, list[int]] = {}
    for b, r in enumerate(rows):
        groups.setdefault(r.settings, []).append(b)
    out: list = [None] * len(rows)
    for members in groups.values():
        for b, choice in zip(members, choose_rows(logits[members], [rows[b] for b in members])):
            out[b] = choice
    return out
