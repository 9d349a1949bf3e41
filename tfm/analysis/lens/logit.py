"""The logit lens: each layer's residual stream read through the final norm and unembedding."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core import cancel
from ...core.model import GPT
from ...core.trace import Trace


@dataclass(frozen=True)
class LogitLens:
    labels: list[str]  # "embed", "block 0", ... one per row
    top_ids: torch.Tensor  # (L+1, T, k)
    top_probs: torch.Tensor  # (L+1, T, k)
    probs: torch.Tensor | None  # (L+1, T, V) full distributions; None with keep_probs=False


def residual_streams(trace: Trace, positions: slice | None = None) -> torch.Tensor:
    """The residual stream after the embedding and after every block, batch row 0: (L+1, T, D)."""
    pos = positions or slice(None)
    return torch.stack([x[pos] for _, x in trace.residual_streams(0)])  # (L+1, T, D)


# Rows (layer x position) per unembedding product. The vocabulary matrix is the largest the model
# has (113 MB for SmolLM2) and a product reads it once whatever its rows: one layer's few positions
# at a time read it L+1 times (SmolLM2, 32 positions: 31 products of 32 rows; docs/benchmarks.md).
LENS_ROWS = 256


@torch.no_grad()
def decode_streams(
    model: GPT,
    streams: torch.Tensor,
    k: int = 5,
    keep_probs: bool = True,
    n_words: int | None = None,
    should_stop: cancel.ShouldStop = None,
) -> LogitLens:
    """Read (L+1, T, D) residual streams through the final norm (pre-norm models) and the
    unembedding, LENS_ROWS rows of every layer and position at a time. Without keep_probs one
    chunk's (LENS_ROWS, V) is alive at a time, not (L+1, T, V): GPT-2 at 1024 positions would
    otherwise need 2.7 GB. `n_words`: the tokenizer's size when the vocabulary has padded rows
    that are no token (they get probability 0, as in sampling). `should_stop` (tfm.core.cancel) is
    asked before each chunk."""
    p = next(model.parameters())
    n_rows, t, d = streams.shape
    flat = streams.to(p.device, p.dtype).reshape(n_rows * t, d)  # (L+1) * T rows
    ids, vals, kept = [], [], []
    for x in flat.split(LENS_ROWS):  # (<= LENS_ROWS, D)
        cancel.check(should_stop, "the logit lens")
        if model.ln_final is not None:
            x = model.ln_final(x)
        probs = model.unembed(x)[..., :n_words].float().softmax(-1)  # (rows, V or n_words)
        top = probs.topk(min(k, probs.shape[-1]), dim=-1)
        ids.append(top.indices)
        vals.append(top.values)
        kept += [probs] if keep_probs else []
    labels = ["embed"] + [f"block {i}" for i in range(n_rows - 1)]
    grid = lambda parts: torch.cat(parts).view(n_rows, t, -1)  # noqa: E731  (L+1, T, k or V)
    return LogitLens(labels, grid(ids), grid(vals), grid(kept) if keep_probs else None)


def logit_lens(
    model: GPT,
    trace: Trace,
    k: int = 5,
    positions: slice | None = None,
    keep_probs: bool = True,
    n_words: int | None = None,
    should_stop: cancel.ShouldStop = None,
) -> LogitLens:
    """What each layer would predict: the residual stream after the embedding and after every
    block, decoded as if it were the last layer's. `positions` picks a window of the trace."""
    return decode_streams(model, residual_streams(trace, positions), k, keep_probs, n_words, should_stop)
