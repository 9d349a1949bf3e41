"""Activation steering: a direction in one layer's residual stream, added during a forward or
a generation as a per-call `tfm.core.edits.Steer` (the shared model is never changed).

    vec = pair_vector(lm, " happy", " sad", layer=3)            # from a pair of prompts
    vec = feature_vector(sae, 42, scale=1.0)                    # or an SAE feature's decoder row
    plain, steered = steered_pair(lm, "Once upon a time", vec, strength=4.0, seed=1)
    probs = sweep(lm, ids, vec, strengths, token)               # one batched forward (a long prompt: a few)

Each long computation takes `should_stop` (tfm.core.cancel): asked between steps (generation),
before each block of each batched forward (the sweep); yes raises `Cancelled`.

A vector is added to the stream entering block `layer` (resid_pre), the point SAEs read.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from ..core import cancel
from ..core import edits as E
from ..core.validate import check_int
from ..generation.generate import generate
from .attribution import check_token
from .sae import SAE, stream_at

How = Literal["last", "mean"]
Where = Literal["all", "prompt", "generated"]
MAX_SWEEP = 64           # strengths in one sweep
SWEEP_TOKENS = 8192      # prompt positions in one of its batched forwards (rows x length; 21 rows: 390 tokens)


@dataclass(frozen=True, eq=False)
class SteeringVector:
    """A direction (D,) float32 at `layer`, and where it came from (for people)."""

    vector: torch.Tensor
    layer: int
    source: str

    def edit(self, strength: float, start: int = 0, stop: int | None = None, row: int | None = None) -> E.Steer:
        return E.Steer(self.layer, self.vector, float(strength), start, stop, row=row)


def check_layer(lm, layer: int) -> int:
    return check_int("layer", layer, 0, lm.config.n_layer - 1, " (the block whose input stream is steered)")


def _stream(lm, text: str, layer: int, how: How, what: str) -> torch.Tensor:
    ids = lm.tokenizer.prompt_ids(text)
    if not ids:
        raise ValueError(f"the {what} prompt is empty: give it some text")
    ctx = lm.config.context_length
    if len(ids) > ctx:
        raise ValueError(f"the {what} prompt has {len(ids)} tokens; this model reads at most {ctx}")
    x = stream_at(lm.model, torch.tensor([ids], device=lm.device), layer)[0].float().cpu()  # (T, D)
    if how == "last":
        return x[-1]
    return x[1:].mean(0) if len(x) > 1 else x[0]  # the first position is an attention sink with an outsized
    # stream in many models (SmolLM2's is ~100x the others): averaging it in would swamp the direction


@torch.no_grad()
def pair_vector(lm, positive: str, negative: str, layer: int, how: How = "last") -> SteeringVector:
    """stream(positive) - stream(negative) entering `layer`: at each prompt's last position, or
    averaged over its positions but the first ("mean"; see _stream). Prompts of any lengths."""
    if how not in get_args(How):
        raise ValueError(f"how={how!r}: choose 'last' or 'mean'")
    layer = check_layer(lm, layer)
    v = _stream(lm, positive, layer, how, "positive") - _stream(lm, negative, layer, how, "negative")
    return SteeringVector(v, layer, f"{positive!r} − {negative!r} at layer {layer} ({how})")


def feature_vector(sae: SAE, feature: int, scale: float = 1.0) -> SteeringVector:
    """An SAE feature's decoder row times `scale` (e.g. its largest held-out activation, so that
    strength 1 writes it as strongly as it ever fired there)."""
    f = check_int("feature", feature, 0, sae.cfg.n_features - 1, " (the SAE's features)")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"feature scale must be a positive finite number, got {scale!r}")
    return SteeringVector(sae.W_dec[f].detach().float().cpu() * scale, sae.cfg.layer, f"feature {f}")


@torch.no_grad()
def read_out(lm, vector: torch.Tensor, n: int = 10) -> tuple[list[int], list[float], list[int], list[float]]:
    """The tokens a direction promotes and suppresses most, read through the final norm's gain
    (centred for LayerNorm) and the unembedding: (ids up, scores up, ids down, scores down)."""
    model = lm.model
    d = vector.float().to(lm.device)
    norm = model.ln_final
    if norm is not None:
        d = d * norm.weight.float()
        if norm.kind == "layernorm":
            d = d - d.mean()
    scores = (model.unembed.weight.float() @ d)[: min(lm.tokenizer.vocab_size, lm.config.vocab_size)]
    up, down = scores.topk(n), (-scores).topk(n)
    return up.indices.tolist(), up.values.tolist(), down.indices.tolist(), (-down.values).tolist()


def check_strengths(strengths: Sequence[float]) -> list[float]:
    out = [float(s) for s in strengths]
    if not 1 <= len(out) <= MAX_SWEEP:
        raise ValueError(f"give 1..{MAX_SWEEP} strengths, got {len(out)}")
    for s in out:
        E.Steer(0, torch.zeros(1), s)  # the one check of a strength (finite, bounded)
    return out


@torch.no_grad()
def sweep(lm, ids: Sequence[int], vec: SteeringVector, strengths: Sequence[float], token: int,
          should_stop: cancel.ShouldStop = None) -> torch.Tensor:
    """(S,) probability of `token` after the last of `ids`, steering every position at each
    strength: batched forwards with one Steer per row, as many rows in each as fit SWEEP_TOKENS
    positions (all of them for a short prompt; the batch's memory stays bounded for a long one).
    `should_stop` is asked before each block of each batch."""
    strengths = check_strengths(strengths)
    token = check_token(token, lm.config.vocab_size)
    ids = list(ids)
    if not 1 <= len(ids) <= lm.config.context_length:
        raise ValueError(f"the prompt must have 1..{lm.config.context_length} tokens, got {len(ids)}")
    per, out = max(1, SWEEP_TOKENS // len(ids)), []
    for first in range(0, len(strengths), per):
        part = strengths[first:first + per]
        batch = torch.tensor([ids] * len(part), device=lm.device)                    # (rows, T)
        edits = [vec.edit(s, row=r) for r, s in enumerate(part)]
        h = lm.model.hidden(batch, edits=edits, should_stop=should_stop)[:, -1]       # (rows, D)
        out.append(lm.model.unembed(h).float().softmax(-1)[:, token].cpu())
    return torch.cat(out)                                                             # (S,)


def positions(where: Where, n_prompt: int) -> tuple[int, int | None]:
    """Steer's (start, stop) for steering the prompt, the generated tokens or both."""
    if where not in get_args(Where):
        raise ValueError(f"where={where!r}: choose 'all', 'prompt' or 'generated'")
    return {"all": (0, None), "prompt": (0, n_prompt), "generated": (n_prompt, None)}[where]


def steered_pair(lm, prompt: str, vec: SteeringVector, strength: float, seed: int = 0,
                 max_new_tokens: int = 40, temperature: float = 1.0, top_p: float = 1.0,
                 where: Where = "all", should_stop: cancel.ShouldStop = None) -> tuple[str, str]:
    """Text generated without and with the steering, same seed and settings; `should_stop`
    is asked before every token of both."""
    plain = generate(lm, prompt, max_new_tokens, temperature, top_p=top_p, seed=seed, should_stop=should_stop)
    start, stop = positions(where, len(plain.prompt.ids))
    steered = generate(lm, prompt, max_new_tokens, temperature, top_p=top_p, seed=seed,
                       edits=[vec.edit(strength, start, stop)], should_stop=should_stop)
    return _text(plain), _text(steered)


def _text(gen) -> str:
    text = ""
    for step in gen:
        text = step.text_so_far
    return text
