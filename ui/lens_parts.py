"""The logit-lens page's grid: a window of the lens (`ui.run.PromptRun.lens`) as what the chart
draws (top pieces, hover text, which cells are the token that really follows), and the names the
page shows from `tfm.analysis` (the lenses, the tuned lens's training command)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tfm.analysis.lens.compare import LENSES, fit_positions
from tfm.analysis.lens.tuned import TRAIN_COMMAND, TunedLens
from tfm.viz import sampling as sampling_figs
from ui.run import PromptRun

__all__ = ["LENSES", "TRAIN_COMMAND", "LensGrid", "grid"]


@dataclass(frozen=True)
class LensGrid:
    """Rows (layers) × the window's positions: the top token's probability and piece, the hover
    text (the real next token, then the top 5) and whether the top token is the real next one."""

    rows: list[str]
    top_prob: np.ndarray
    pieces: list[list[str]]
    hover: list[list[str]]
    bold: np.ndarray


def grid(run: PromptRun, start: int, stop: int, tuned: TunedLens | None) -> LensGrid:
    tok = run.lm.tokenizer
    rows, top_ids, top_probs = run.lens(start, stop, tuned)  # the window's positions, top 5 only
    ids_l, probs_l = top_ids.tolist(), top_probs.tolist()  # plain lists: ~1,000 cells, no tensor indexing each
    pieces = [[tok.display_piece(cell[0]) for cell in layer] for layer in ids_l]
    nxt = list(run.ids[start + 1 : stop + 1])  # the token that really follows each position

    def hover_text(r: int, c: int) -> str:
        """The token that really follows, then the layer's top 5 with their probabilities."""
        actual = sampling_figs.esc(tok.display_piece(nxt[c])) if c < len(nxt) else "(end of prompt)"
        top5 = (f"{sampling_figs.esc(tok.display_piece(i))}: {p:.4f}" for i, p in zip(ids_l[r][c], probs_l[r][c]))
        return f"actual next: {actual}<br>" + "<br>".join(top5)

    hover = [[hover_text(r, c) for c in range(stop - start)] for r in range(len(rows))]
    nxt_or_none = torch.tensor(nxt + [-1] * (stop - start - len(nxt)))  # the prompt's last position has no next
    return LensGrid(rows, top_probs[:, :, 0].numpy(), pieces, hover, (top_ids[:, :, 0] == nxt_or_none).numpy())


def fit_span(n_pos: int) -> str:
    """Which of the prompt's positions the KL chart averages over, in words."""
    pos = fit_positions(n_pos)
    if pos.step is None or pos.step == 1:
        return "this prompt's positions after the first"
    shown = len(range(n_pos)[pos])
    return f"{shown} of this prompt's {n_pos - 1:,} positions after the first (one in every {pos.step}, evenly spaced)"
