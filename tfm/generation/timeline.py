"""What a generation timeline keeps of each Step: plain numbers, and the few tensors the
timeline draws. A Step's full trace is far too big to keep per step (GPT-2 small: ~50 MB
each), so a record keeps the logits (V,), the attention rows of the position that predicted
the token (L, H, S) and its residual streams (L+1, D), on the CPU, detached and copied.
`tfm.loaders.limits.generation_bytes` bounds what a whole timeline of these records holds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .generate import Step

__all__ = ["StepRecord", "step_record"]


@dataclass(frozen=True)
class StepRecord:
    """One generated token as the timeline shows it (fields as in `tfm.generation.generate.Step`)."""

    index: int
    position: int
    token_id: int
    text: str
    display: str
    new_text: str
    prob: float
    rank: int
    prob_original: float
    rank_original: int
    n_kept: int
    entropy_after: float  # nats, of the distribution it was drawn from
    elapsed_s: float
    stop_reason: str | None
    logits: torch.Tensor | None = None  # (V,) float32, padding rows at -inf
    attn: torch.Tensor | None = None  # (L, H, S) the predicting query's attention rows (traced runs)
    resid: torch.Tensor | None = None  # (L+1, D) its residual streams (traced runs)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors kept (what counts against a session's memory)."""
        return sum(t.numel() * t.element_size() for t in (self.logits, self.attn, self.resid) if t is not None)


def step_record(step: Step, keep_tensors: bool = True) -> StepRecord:
    """The record of `step`; without `keep_tensors` only its numbers and text."""
    numbers = step.summary() | {"new_text": step.new_text, "entropy_after": float(step.breakdown.entropy_after)}
    tensors = {}
    if keep_tensors:
        tensors["logits"] = step.logits.detach().float().cpu().clone()  # (V,)
    tr = step.trace
    if keep_tensors and tr is not None:
        # a batched row's trace (batch_rows.RowTrace) holds just these rows, in tensors of its own:
        # read per layer, each record pays one slice per layer, and a class's batch makes ~1000 records
        attn, resid = tr.query_rows() if hasattr(tr, "query_rows") else _query_rows(tr)
        tensors["attn"], tensors["resid"] = attn.float().cpu(), resid.cpu()  # (L, H, S), (L+1, D)
    return StepRecord(**numbers, **tensors)


def _query_rows(tr) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole trace's last query: its attention rows (L, H, S) and residual streams (L+1, D),
    stacked into new tensors (no view keeps the trace alive)."""
    n = tr.n_layers()  # index per layer: stacking whole patterns would copy every query row
    attn = torch.stack([tr.pattern(i, 0)[:, -1, :] for i in range(n)])  # (L, H, S)
    return attn, torch.stack([s[-1] for _, s in tr.residual_streams(0)])  # (L+1, D)
