"""Both lenses on a prompt: the logit lens's and the tuned lens's grids, and how far each layer's
reading is from the model's final distribution.

    fits = compare_lenses(lm.model, trace, lens)        # {"logit": LensFit, "tuned": LensFit}
    fits["tuned"].kl.mean(1)                            # (L+1,) nats per stream, over positions
    grid = lens_grid(lm.model, trace, lens, k=5)        # a LogitLens of the translated streams

KL(final ‖ lens) = sum_v p_final(v) (log p_final(v) - log p_lens(v)), in nats, where p_final is
the last stream decoded (the model's own output) and p_lens the row's stream (translated, for the
tuned lens) decoded the same way; "agree" is whether the two top-1 tokens are the same. The page,
the notebook figures, the CLI, the trainer's held-out table and bench/bench_lens.py all call these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core import cancel
from ...core.model import GPT
from ...core.trace import Trace
from .logit import LENS_ROWS, LogitLens, decode_streams, residual_streams
from .tuned import TunedLens

LENSES = ("logit", "tuned")


@dataclass(frozen=True)
class LensFit:
    """One lens on T positions: KL to the final distribution and top-1 agreement per stream."""

    labels: list[str]  # "embed", "block 0", ... one per row
    kl: torch.Tensor  # (L+1, T) nats
    agree: torch.Tensor  # (L+1, T) bool: the row's top-1 is the final top-1

    def mean_kl(self) -> list[float]:
        return [float(v) for v in self.kl.double().mean(1)]

    def agreement(self) -> list[float]:
        return [float(v) for v in self.agree.double().mean(1)]


def decode_log_probs(model: GPT, x: torch.Tensor, n_words: int | None = None) -> torch.Tensor:
    """(..., D) streams -> (..., V) log-probabilities through the final norm and the unembedding,
    as `decode_streams` reads them (padded vocabulary rows past `n_words` left out)."""
    if model.ln_final is not None:
        x = model.ln_final(x)
    return model.unembed(x)[..., :n_words].float().log_softmax(-1)


def _chunk_fit(model: GPT, chunk: torch.Tensor, n_words: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, R, D) streams of c positions -> (c, R) KL to row R-1 and (c, R) top-1 agreement with it,
    from one unembedding product. With p the last row's distribution, z = W n + b a row's logits
    (n: the normed stream) and lse its logsumexp, KL = sum_v p(v) (z_last(v) - z(v)) + lse - lse_last,
    and sum_v p(v) (z_last(v) - z(v)) = (p W) . (n_last - n): no (R, V) log-softmax or difference is
    made, and the last row's KL is exactly 0."""
    c, n_rows, d = chunk.shape
    x = chunk.reshape(c * n_rows, d)
    if model.ln_final is not None:
        x = model.ln_final(x)
    z = model.unembed(x)[..., :n_words].float().view(c, n_rows, -1)  # (c, R, V)
    lse = z.logsumexp(-1)  # (c, R)
    p = (z[:, -1] - lse[:, -1:]).exp()  # (c, V) the output's distribution
    p_w = p @ model.unembed.weight[: z.shape[-1]].float()  # (c, D)
    x = x.view(c, n_rows, d).float()
    spread = torch.bmm(x[:, -1:] - x, p_w.unsqueeze(-1)).squeeze(-1)  # (c, R)
    top = z.argmax(-1)  # (c, R)
    return spread + lse - lse[:, -1:], top == top[:, -1:]


@torch.no_grad()
def lens_fit(
    model: GPT, streams: torch.Tensor, n_words: int | None = None, should_stop: cancel.ShouldStop = None
) -> LensFit:
    """KL and agreement of (L+1, T, D) streams' readings with the last row's (the model's output),
    every row of a few positions per unembedding product (about LENS_ROWS rows), so the vocabulary
    matrix is read once per product and only (LENS_ROWS, V) logits are alive."""
    p = next(model.parameters())
    n_rows, t, _ = streams.shape
    step = max(1, LENS_ROWS // n_rows)  # positions per product
    kl, agree = torch.zeros(n_rows, t), torch.zeros(n_rows, t, dtype=torch.bool)
    for a in range(0, t, step):
        cancel.check(should_stop, "comparing the lenses")
        chunk = streams[:, a : a + step].to(p.device, p.dtype).transpose(0, 1)  # (c, L+1, D)
        got_kl, got_agree = _chunk_fit(model, chunk, n_words)
        kl[:, a : a + step], agree[:, a : a + step] = got_kl.t().cpu(), got_agree.t().cpu()
    labels = ["embed"] + [f"block {i}" for i in range(n_rows - 1)]
    return LensFit(labels, kl, agree)


def compare_lenses(
    model: GPT,
    trace: Trace,
    lens: TunedLens | None,
    positions: slice | None = None,
    n_words: int | None = None,
    should_stop: cancel.ShouldStop = None,
) -> dict[str, LensFit]:
    """{"logit": ..., "tuned": ...} on the trace's positions (the tuned one only with a lens)."""
    streams = residual_streams(trace, positions)
    out = {"logit": lens_fit(model, streams, n_words, should_stop)}
    if lens is not None:
        out["tuned"] = lens_fit(model, lens.translate(streams), n_words, should_stop)
    return out


def lens_grid(
    model: GPT,
    trace: Trace,
    lens: TunedLens | None,
    k: int = 5,
    positions: slice | None = None,
    keep_probs: bool = True,
    n_words: int | None = None,
    should_stop: cancel.ShouldStop = None,
) -> LogitLens:
    """The logit lens's grid read from the streams translated by `lens` (what each layer predicts,
    tuned); the plain logit lens with None: one call for a page's lens choice."""
    streams = residual_streams(trace, positions)
    if lens is not None:
        streams = lens.translate(streams)
    return decode_streams(model, streams, k, keep_probs, n_words, should_stop)


# Positions a prompt's per-layer means read at most: each costs L+1 full-vocabulary decodes per lens,
# so all 1,023 of a 1,024-token prompt made the Logit lens page take 20 s on GPT-2's shape.
FIT_MOST = 128


def fit_positions(n_pos: int, most: int = FIT_MOST) -> slice:
    """The positions a prompt's per-layer means read: every one after the first (the attention
    sink's, left out of the tuned lens's training and held-out text too), or the only one; past
    `most` of them, every step-th after the first, evenly spaced, so at most `most` are decoded."""
    if n_pos <= 1:
        return slice(None)
    return slice(1, None, -(-(n_pos - 1) // most))


def prompt_fits(
    model: GPT, trace: Trace, lens: TunedLens | None, n_words: int | None = None, should_stop: cancel.ShouldStop = None
) -> dict[str, LensFit]:
    """`compare_lenses` on the prompt's `fit_positions`: what the page's chart and the CLI show."""
    n_pos = residual_streams(trace).shape[1]
    return compare_lenses(model, trace, lens, fit_positions(n_pos), n_words, should_stop)
