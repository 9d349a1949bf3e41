"""A guided tour of one forward pass: the real numbers of the running model, step by step.

`tour(lm, trace, ids, pos)` follows the token at position `pos` from text to the next token
through the model's own computation, reading every number from the trace (or the weights)
of that forward. The steps follow the architecture: RoPE rotates q and k instead of adding
positions, RMSNorm has no mean or bias, SwiGLU gates, post-norm normalises after each
residual sum. Each step carries a few small tensors (the first `SHOW` entries of long
vectors, with the full shape), a formula, a sentence or two, the page that goes deeper,
and at some steps a question whose answer is computed from the same numbers (`tfm.teach.checks`).
The steps by part of the model: here the text's way in (tokens, embedding, positions);
`tour_attention` one block's attention, `tour_block` the rest of the block, `tour_output` the
logits and the draw; `tour_shown` what a step is and how it cuts tensors to a slide.
"""

from __future__ import annotations

import torch

from ..core.trace import Trace
from ..generation.sampling import SamplingSettings
from .tour_attention import attention_steps
from .tour_block import block_steps
from .tour_output import output_steps
from .tour_shown import SHOW, Focus, Shown, TourStep, key_window, mask_window, vec

__all__ = ["SHOW", "Focus", "Shown", "TourStep", "key_window", "mask_window", "tour", "vec"]


def _embed_steps(lm, tr: Trace, ids, labels, f: Focus) -> list[TourStep]:
    cfg, p, tok = lm.config, f.pos, int(ids[f.pos])
    first = key_window(p)
    steps = [
        TourStep(
            "tokens",
            "Text becomes token ids",
            r"\text{text} \;\to\; (t_0, t_1, \dots, t_{T-1}),\quad t_i \in \{0,\dots,V-1\}",
            f"The tokenizer cuts the prompt into {len(ids)} pieces from a vocabulary of V = {cfg.vocab_size:,}. "
            f"The tour follows position {p}, {labels[p]!r} (id {tok}).",
            {
                "token ids": Shown(
                    torch.tensor([float(i) for i in ids[first]]),
                    (len(ids),),
                    tuple(labels[first]),
                    note=f"positions {first.start}..{p} of {len(ids)}",
                )
            },
            "pages/tokens.py",
        ),
        TourStep(
            "embed",
            "Token embedding: one row of W_E",
            r"e = W_E[t_i], \quad W_E \in \mathbb{R}^{V \times d_{model}}",
            f"The id picks row {tok} of the embedding matrix: a vector of d_model = {cfg.d_model} learned numbers.",
            {f"e = W_E[{tok}]": vec(tr["embed"][0, p])},
            "pages/shapes.py",
        ),
    ]
    return steps + [_position_step(cfg, tr, p)]


def _position_step(cfg, tr: Trace, p: int) -> TourStep:
    """The positions step, one variant per kind of positional encoding (same key for all)."""
    x0 = tr["blocks.0.resid_pre"][0, p]
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        return _added_position_step(cfg, tr, p, x0)
    if cfg.pos_encoding == "rope":
        return TourStep(
            "positions",
            "Position: RoPE rotates queries and keys",
            r"\begin{pmatrix}q'_k\\q'_{k+d/2}\end{pmatrix} = \begin{pmatrix}\cos i\theta_k & -\sin i\theta_k"
            r"\\ \sin i\theta_k & \cos i\theta_k\end{pmatrix}\begin{pmatrix}q_k\\q_{k+d/2}\end{pmatrix},"
            r"\quad \theta_k = b^{-2k/d_{head}}",
            f"Nothing is added here: x_0 = e. Inside every attention layer, each pair of q and k "
            f"dimensions is rotated by position × θ_k, so q·k depends on the distance between tokens. "
            f"These are position {p}'s angles in radians.",
            {f"angles at position {p}": vec(tr["rope.angles"][p]), "x_0 = e": vec(x0)},
            "pages/positions.py",
        )
    return TourStep(
        "positions",
        "Position: none is added",
        r"x_0 = e",
        "This model has no positional encoding: only the causal mask tells it what came before. "
        "The residual stream entering block 0 is the embedding itself.",
        {"x_0 = e": vec(x0)},
        "pages/positions.py",
    )


def _added_position_step(cfg, tr: Trace, p: int, x0: torch.Tensor) -> TourStep:
    """A learned or sinusoidal position vector, added to the embedding."""
    kind = "a learned row of W_pos" if cfg.pos_encoding == "learned" else "sines and cosines of the position"
    return TourStep(
        "positions",
        "Position: added to the embedding",
        r"x_0 = e + p_i"
        + (
            r",\quad p_{i,2k} = \sin\!\big(i/10000^{2k/d}\big)"
            if cfg.pos_encoding == "sinusoidal"
            else r",\quad p_i = W_{pos}[i]"
        ),
        f"Position {p} adds {kind}, so the same word at another place looks different. "
        "The sum is the residual stream entering block 0.",
        {f"p_{p}": vec(tr["pos_embed"][p]), "x_0 = e + p": vec(x0)},
        "pages/positions.py",
    )


def tour(
    lm,
    trace: Trace,
    ids,
    labels: list[str],
    focus: Focus,
    settings: SamplingSettings = SamplingSettings(),
    seed: int = 0,
    n_words: int | None = None,
) -> list[TourStep]:
    """The tour's steps for the token at `focus.pos` of a traced forward of `ids` (batch 0)."""
    ids, cfg = list(ids), lm.config
    if not 0 <= focus.pos < len(ids):
        raise ValueError(f"position {focus.pos} is outside the prompt's {len(ids)} tokens; pick 0..{len(ids) - 1}")
    if not (0 <= focus.layer < cfg.n_layer and 0 <= focus.head < cfg.n_head):
        raise ValueError(
            f"block {focus.layer}, head {focus.head} does not exist: the model has "
            f"{cfg.n_layer} blocks of {cfg.n_head} heads"
        )
    n_words = n_words or min(lm.tokenizer.vocab_size, cfg.vocab_size)
    return (
        _embed_steps(lm, trace, ids, labels, focus)
        + attention_steps(lm, trace, labels, focus)
        + block_steps(lm, trace, focus)
        + output_steps(lm, trace, ids, labels, focus, settings, seed, n_words)
    )
