"""What `python -m tfm.train.tuned_lens` reads and measures: every residual stream of the mix's
windows, the final norm and unembedding as a function of its input only (the model's weights
detached: no gradient for them, nothing changed on the model), and the held-out table per domain.

The streams are the model's own blocks called in order (`GPT.hidden` without a recorder), so they
equal a trace's `residual_streams` (tests compare them).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis.lens.compare import lens_fit
from ..analysis.lens.tuned import TunedLens, TunedLensConfig, load_tuned_lens, translator_file
from . import mix
from .transcoder_eval import windows


def words(lm) -> int:
    """The vocabulary rows that are tokens (padded rows left out, as the page's lens does)."""
    return min(lm.tokenizer.vocab_size, lm.config.vocab_size)


def set_files(cfg: TunedLensConfig) -> list[str]:
    return ["card.json"] + [translator_file(r) for r in range(cfg.n_streams)]


@torch.no_grad()
def streams_of(model, wins: torch.Tensor) -> torch.Tensor:
    """(B, T) windows -> (B, T, L+1, D): the stream after the embedding and after every block."""
    x, angles = model.embed(wins, 0, None)
    out = [x]
    for i, block in enumerate(model.blocks):
        x = block(x, None, angles, None, i, None)
        out.append(x)
    return torch.stack(out, 2)


def collect_streams(model, ids: np.ndarray, ctx: int, skip: int, rows: int = 8, log=None) -> torch.Tensor:
    """(N, L+1, D) fp16 streams of every window of `ctx` ids but each window's first `skip` positions."""
    wins = windows(ids, ctx)
    if len(wins) == 0 or skip >= ctx:
        raise ValueError(f"--tokens must give at least one window of --ctx {ctx} tokens, and --skip-first be below it")
    parts = []
    for r in range(0, len(wins), rows):
        parts.append(streams_of(model, wins[r : r + rows])[:, skip:].flatten(0, 1).half())
        if log is not None and (r // rows) % 10 == 0:
            log(f"streams: {min(r + rows, len(wins))}/{len(wins)} windows")
    return torch.cat(parts)


def decode_with_grad(model, x: torch.Tensor, n_words: int | None) -> torch.Tensor:
    """(B, D) -> (B, V) log-probabilities through the final norm and unembedding, differentiable in
    x only (the weights are detached)."""
    norm = model.ln_final
    if norm is not None:
        w = norm.weight.detach()
        if norm.kind == "layernorm":
            x = F.layer_norm(x, x.shape[-1:], w, None if norm.bias is None else norm.bias.detach(), norm.eps)
        else:
            x = F.rms_norm(x, x.shape[-1:], w, norm.eps)
    return F.linear(x, model.unembed.weight.detach())[..., :n_words].float().log_softmax(-1)


def _summary(fit) -> dict:
    return {"kl": [round(v, 5) for v in fit.mean_kl()], "top1_agreement": [round(v, 4) for v in fit.agreement()]}


def measure(lm, out, corpus, eval_tokens: int, ctx: int, skip: int, state: dict, log=print) -> dict:
    """Per held-out domain: tuned (as the files load) and logit lens KL and agreement per stream,
    and the tuned KL before fp16 rounding (the cost of the stored form)."""
    lens = load_tuned_lens(out, lm)
    unrounded = TunedLens(lens.cfg, state["weight"].float(), state["bias"].float(), {}, "unrounded")
    ids = mix.domain_ids(lm.tokenizer, corpus, "heldout", -(-eval_tokens // len(mix.DOMAINS)))
    table = {}
    for domain, d_ids in ids.items():
        streams = collect_streams(lm.model, d_ids, ctx, skip).float().transpose(0, 1)  # (L+1, N, D)
        n = words(lm)
        tuned, logit = lens_fit(lm.model, lens.translate(streams), n), lens_fit(lm.model, streams, n)
        before = lens_fit(lm.model, unrounded.translate(streams), n)
        table[domain] = {
            "positions": streams.shape[1],
            "tuned": _summary(tuned),
            "logit": _summary(logit),
            "tuned_kl_before_fp16": [round(v, 5) for v in before.mean_kl()],
        }
        log(
            f"{domain}: tuned KL {[round(v, 2) for v in tuned.mean_kl()]}, logit {[round(v, 2) for v in logit.mean_kl()]}"
        )
    return table
