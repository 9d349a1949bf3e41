"""The engine's one entropy: attention rows (tfm.analysis), softmax experiments
(tfm.teach.experiments) and sampling distributions (tfm.sampling) all measure it here."""

from __future__ import annotations

import torch

__all__ = ["entropy"]


def entropy(probs: torch.Tensor | None = None, *, log_probs: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy in nats along the last axis, with 0·log 0 = 0: (..., V) -> (...).

    Give `probs` (attention rows, softmax outputs) or, when you have them, `log_probs`
    (a log_softmax): those stay exact where probabilities underflow to 0 at a low sampling
    temperature, and are used as given instead of log(exp(...)).
    """
    if (probs is None) == (log_probs is None):
        raise ValueError("entropy needs exactly one of probs= or log_probs=")
    if log_probs is not None:  # p log p is NaN exactly where p = 0 and log p = -inf: make it 0
        p = log_probs.exp()
        return -(p * log_probs).nan_to_num_(nan=0.0).sum(dim=-1)  # one pass, not compare + mask
    # log of 1 where p = 0: no -inf, so no NaN in the product or its gradient
    p, log_p = probs, torch.where(probs > 0, probs, torch.ones_like(probs)).log()
    return -(p * log_p).masked_fill_(~(p > 0), 0.0).sum(dim=-1)  # as where(p > 0, p log p, 0), one pass less
