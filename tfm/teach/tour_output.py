"""The tour's last steps, after the blocks: how the stream grew, the final norm, the logits over
the vocabulary, temperature / top-k / top-p, and the drawn token."""

from __future__ import annotations

import torch

from ..core.trace import Trace
from ..generation.sampling import SamplingSettings, breakdown, sample
from .checks import next_token_check
from .tour_shown import SHOW, Focus, Shown, TourStep, vec


def output_steps(
    lm, tr: Trace, ids, labels, f: Focus, settings: SamplingSettings, seed: int, n_words: int
) -> list[TourStep]:
    """After the last block: the stream's growth over the blocks, the final norm, the logits, sampling
    and the drawn token."""
    cfg, p, tok = lm.config, f.pos, lm.tokenizer
    logits = tr.logits_at(p)[:n_words].float()  # one row: never the (T, V) logits (1 GB for Gemma 3 at 1,024 tokens)
    return [
        _blocks_step(cfg, tr, p),
        _final_norm_step(cfg, tr, p),
        _logits_step(logits, tok, labels[p], n_words),
    ] + _sampling_steps(logits, tok, settings, seed)


def _blocks_step(cfg, tr: Trace, p: int) -> TourStep:
    """Every block repeats: the length of the stream at `p` entering block 0 and after each block."""
    norms = [tr[f"blocks.{i}.resid_pre"][0, p].norm() for i in range(cfg.n_layer)]
    norms.append(tr[f"blocks.{cfg.n_layer - 1}.resid_post"][0, p].norm())
    growth = Shown(
        torch.stack(norms).float(), (cfg.n_layer + 1,), tuple(["x_0"] + [f"after {i}" for i in range(cfg.n_layer)])
    )
    return TourStep(
        "blocks",
        f"The same for every block ({cfg.n_layer} of them)",
        r"x_{l+1} = \mathrm{block}_l(x_l), \quad l = 0, \dots, L-1",
        "Every block repeats attention and MLP with its own weights. The length ‖x‖ of the residual "
        "vector at this position, entering block 0 and after each block:",
        {"‖x‖": growth},
        "pages/norms.py",
        chart=growth,
    )


def _final_norm_step(cfg, tr: Trace, p: int) -> TourStep:
    if cfg.norm_placement == "pre":
        return TourStep(
            "final_norm",
            "Final norm",
            r"x_L \leftarrow \mathrm{LN_f}(x_L)",
            "One last norm before the unembedding, so the logits do not scale with the stream's growth.",
            {"x_L": vec(tr["ln_final.input"][0, p]), "LN_f(x_L)": vec(tr["ln_final.output"][0, p])},
            "pages/norms.py",
        )
    return TourStep(
        "final_norm",
        "Final norm: already done",
        r"x_L = \mathrm{LN_2}(\dots)",
        "In a post-norm model the last block already ends with a norm, so there is no separate one.",
        {"x_L": vec(tr[f"blocks.{cfg.n_layer - 1}.resid_post"][0, p])},
        "pages/norms.py",
    )


def _logits_step(logits: torch.Tensor, tok, label: str, n_words: int) -> TourStep:
    """The highest of the position's `n_words` logits, with their tokens, and the question on them."""
    top = torch.topk(logits, SHOW).indices
    pieces = [repr(x) for x in tok.display_pieces(top.tolist())]
    return TourStep(
        "logits",
        "Logits: a score for every token of the vocabulary",
        r"\ell = x_L\, W_U^{\top},\quad W_U \in \mathbb{R}^{V \times d_{model}}",
        f"One dot product per vocabulary entry ({n_words:,}); the highest scores, with their tokens:",
        {"ℓ (top 8)": Shown(logits[top].clone(), (n_words,), tuple(pieces), note=f"top {SHOW} of {n_words:,}")},
        "pages/logit_lens.py",
        next_token_check(logits, tok, label),
    )


def _sampling_steps(logits: torch.Tensor, tok, settings: SamplingSettings, seed: int) -> list[TourStep]:
    bd = breakdown(logits, settings=settings)
    top = torch.topk(bd.probs_t, SHOW).indices
    pieces = tuple(repr(x) for x in tok.display_pieces(top.tolist()))
    drawn = sample(logits, settings, torch.Generator().manual_seed(seed))
    t, k, pp = settings.temperature, settings.top_k, settings.top_p
    v = logits.shape[0]
    note = f"the {SHOW} most likely after temperature, of {v:,}"
    return [
        TourStep(
            "sampling",
            "Temperature, top-k, top-p",
            r"P(w) \propto \exp(\ell_w / T)\ \text{ over the kept tokens}",
            f"T = {t:g}, top-k = {k or 'off'}, top-p = {pp:g}: {int(bd.n_kept):,} tokens are kept, "
            "in the Hugging Face order (temperature, then top-k, then top-p), and renormalised.",
            {
                "P at T = 1": Shown(bd.probs[top].clone(), (v,), pieces, note=note),
                "P after temperature": Shown(bd.probs_t[top].clone(), (v,), pieces, note=note),
                "P sampled from": Shown(bd.final[top].clone(), (v,), pieces, note=note),
            },
            "pages/next_token.py",
            chart=Shown(bd.final[top].clone(), (v,), pieces, note=note),
        ),
        TourStep(
            "drawn",
            "The drawn token",
            r"t_{next} \sim P" if not settings.greedy else r"t_{next} = \arg\max_w \ell_w",
            f"With seed {seed}, the draw gives {tok.display_piece(drawn)!r} (id {drawn}, probability "
            f"{float(bd.final[drawn]):.2%}). It is appended to the text and the whole pass runs again.",
            {"drawn id, P": Shown(torch.tensor([float(drawn), float(bd.final[drawn])]), (2,), ("id", "P"))},
            "pages/generate.py",
        ),
    ]
