"""The induction-head check: does zero-ablating the strongest induction head (by the engine's
score) hurt the model on a repeated random sequence more than ablating another head of its layer?
(The Why page's check; its batch sweeps live in `tfm.analysis.patching`.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core import edits as E
from .attribution import _model
from .heads import induction_probe, top_head


@dataclass(frozen=True)
class InductionCheck:
    layer: int
    head: int  # the strongest induction head by the engine's score
    score: float
    control: int  # another head of the same layer, picked at random
    loss_clean: float  # mean loss on the repeated half
    loss_ablated: float
    loss_control: float


@torch.no_grad()
def induction_check(lm, seq_len: int = 40, seed: int = 0) -> InductionCheck:
    """Zero-ablate the strongest induction head (by `analysis.induction_probe`) and a random
    other head of its layer; the mean next-token loss on the second copy of a repeated
    random sequence before and after each."""
    model = _model(lm)
    probe = induction_probe(model, seq_len=seq_len, seed=seed)
    layer, head, score = top_head(probe["induction"])
    g = torch.Generator().manual_seed(seed)
    others = [h for h in range(model.config.n_head) if h != head]
    if not others:
        raise ValueError("the model has one head per layer: there is no control head")
    control = others[int(torch.randint(len(others), (1,), generator=g))]
    toks = probe["tokens"].to(next(model.parameters()).device)[None]  # (1, 2n)
    losses = []
    for edit in ([], [E.AblateHead(layer, head)], [E.AblateHead(layer, control)]):
        logits = model(toks, edits=edit).logits[0, seq_len - 1 : -1].float()  # predicts the second copy
        losses.append(float(torch.nn.functional.cross_entropy(logits, toks[0, seq_len:])))
    return InductionCheck(layer, head, score, control, *losses)
