"""Activation steering: a direction in one layer's residual stream, added during a forward or
a generation as a per-call `tfm.core.edits.Steer` (the shared model is never changed).

    vec = pair_vector(lm, "I feel happy.", "I feel sad.", layer=3)   # from a pair of prompts
    vec = feature_vector(sae, 42, scale=1.0)                    # or an SAE feature's decoder row
    plain, steered = steered_pair(lm, "Today I feel", vec, strength=0.4, seed=1)
    probs = sweep(lm, ids, vec, strengths, token)               # one batched forward (a long prompt: a few)

The same on every model, by construction:

* A pair's direction is never read at an attention sink. Real models park attention on their
  first position and give its stream an outsized length (SmolLM2's is ~100x the others'): a
  difference read there is that outlier, not the prompts' meaning. Each prompt is read after the
  model's start token, or after NEUTRAL_PREFIX when it has none, over its own tokens only
  (special tokens skipped), so even a one-token prompt sits at position 1 or later.
* Strength is in units of the layer's typical stream length: a pair's direction is scaled to
  the median length of the stream entering that layer on NEUTRAL_TEXT (`stream_norms`), so
  strength 0.5 adds half a typical stream on the bundled model, SmolLM2 or a GPT-2 alike.
* Steering skips position 0 and a prompt's special tokens unless `include_first=True`
  (`steer_span`), as Neuronpedia does: adding to the sink's stream changes every later token.

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

from ...core import cancel
from ...core import edits as E
from ...core.validate import check_int
from ...generation.generate import generate
from ..attribution import check_token
from ..dictionaries.sae import SAE, stream_at

How = Literal["last", "mean"]
Where = Literal["all", "prompt", "generated"]
MAX_SWEEP = 64  # strengths in one sweep
SWEEP_TOKENS = 8192  # prompt positions in one of its batched forwards (rows x length; 21 rows: 390 tokens)
NEUTRAL_PREFIX = "\n"  # read before a prompt when the model has no start token: position 0 is the sink
NEUTRAL_TEXT = (
    "The town has a small park by the river. In the morning people walk their dogs there, and "
    "children play on the grass. A man sells bread and milk from a cart, and the bus stops at the "
    "corner every hour. In the evening the lights come on along the bridge."
)


class SameStream(ValueError):
    """The two prompts of a pair give the same stream where it is read: no direction to steer by
    (a consequence of valid settings, which the message explains)."""


@dataclass(frozen=True, eq=False)
class SteeringVector:
    """A direction (D,) float32 at `layer`: strength 1 adds `vector` itself. `raw_length` is
    the direction's length before it was scaled (a pair's difference of streams)."""

    vector: torch.Tensor
    layer: int
    source: str
    raw_length: float

    def edit(
        self, strength: float, start: int = 0, stop: int | None = None, row: int | None = None, skip: Sequence[int] = ()
    ) -> E.Steer:
        return E.Steer(self.layer, self.vector, float(strength), start, stop, row=row, skip=tuple(skip))


def check_layer(lm, layer: int) -> int:
    return check_int("layer", layer, 0, lm.config.n_layer - 1, " (the block whose input stream is steered)")


def special_ids(tokenizer) -> frozenset[int]:
    """The tokenizer's special tokens, its start and end-of-text tokens included."""
    ids = set(tokenizer.special_tokens.values()) | {tokenizer.bos_id, tokenizer.eot_id}
    return frozenset(i for i in ids if i is not None)


def reading_ids(lm, text: str, what: str, cut: bool = False) -> tuple[list[int], list[int]]:
    """The ids a prompt is read in and the positions of its own tokens: after the model's start
    token, or after NEUTRAL_PREFIX when the first would sit at position 0; special tokens skipped.
    Longer than the context: ValueError, or with `cut` its first tokens that fit."""
    tok = lm.tokenizer
    ids = tok.prompt_ids(text)
    specials = special_ids(tok)
    if not [i for i in ids if i not in specials]:
        raise ValueError(f"the {what} prompt is empty: give it some text")
    if ids[0] not in specials:
        ids = tok.encode(NEUTRAL_PREFIX) + ids
    ctx = lm.config.context_length
    if len(ids) > ctx and not cut:
        raise ValueError(f"the {what} prompt has {len(ids)} tokens; this model reads at most {ctx}")
    ids = ids[:ctx]
    read = [p for p in range(1, len(ids)) if ids[p] not in specials]
    if not read:
        raise ValueError(f"this model's context ({ctx} tokens) has no room for the {what} prompt after its first token")
    return ids, read


@torch.no_grad()
def stream_norms(lm) -> tuple[float, ...]:
    """The median length of the stream entering each block on NEUTRAL_TEXT, over its own tokens
    (`reading_ids`: never the sink): what strength 1 adds at that layer. One forward."""
    ids, read = reading_ids(lm, NEUTRAL_TEXT, "neutral", cut=True)
    x, angles = lm.model.embed(torch.tensor([ids], device=lm.device), 0, None)
    out = []
    for block in lm.model.blocks:
        out.append(float(x[0, read].float().norm(dim=-1).median()))
        x = block(x, None, angles)
    return tuple(out)


def _stream(lm, text: str, layer: int, how: How, what: str) -> torch.Tensor:
    ids, read = reading_ids(lm, text, what)
    x = stream_at(lm.model, torch.tensor([ids], device=lm.device), layer)[0, read].float().cpu()  # (n, D)
    return x[-1] if how == "last" else x.mean(0)


def _same_stream_reason(positive: str, negative: str, layer: int, how: How) -> str:
    if positive.strip() != negative.strip() and how == "last" and layer == 0:
        # entering block 0 a position holds its token's embedding (and an added position vector, if any)
        return (
            "entering block 0 a position holds only its own token (and its place), and both prompts end "
            "in the same token there: read their streams at a later layer, over every token (mean), or "
            "end the prompts with different words"
        )
    return f"the two prompts give the same stream entering block {layer}: make them differ"


@torch.no_grad()
def pair_vector(
    lm, positive: str, negative: str, layer: int, how: How = "mean", norms: Sequence[float] | None = None
) -> SteeringVector:
    """stream(positive) - stream(negative) entering `layer`, averaged over each prompt's tokens
    ("mean") or at its last ("last"), never at a sink (`reading_ids`); scaled to the layer's
    typical stream length (`norms`, default `stream_norms(lm)`), so strength 1 adds one."""
    if how not in get_args(How):
        raise ValueError(f"how={how!r}: choose 'last' or 'mean'")
    layer = check_layer(lm, layer)
    diff = _stream(lm, positive, layer, how, "positive") - _stream(lm, negative, layer, how, "negative")
    raw = float(diff.norm())
    if not raw > 0:
        raise SameStream(_same_stream_reason(positive, negative, layer, how))
    scale = (stream_norms(lm) if norms is None else norms)[layer]
    return SteeringVector(diff * (scale / raw), layer, f"{positive!r} − {negative!r} at layer {layer} ({how})", raw)


def feature_vector(sae: SAE, feature: int, scale: float = 1.0) -> SteeringVector:
    """An SAE feature's decoder row times `scale` (e.g. its largest held-out activation, so that
    strength 1 writes it as strongly as it ever fired there)."""
    f = check_int("feature", feature, 0, sae.cfg.n_features - 1, " (the SAE's features)")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"feature scale must be a positive finite number, got {scale!r}")
    v = sae.W_dec[f].detach().float().cpu() * scale
    return SteeringVector(v, sae.cfg.layer, f"feature {f}", float(v.norm()))


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


def steer_span(
    tokenizer, ids: Sequence[int], where: Where = "all", include_first: bool = False
) -> tuple[int, int | None, tuple[int, ...]]:
    """Steer's (start, stop, skip) for steering the prompt `ids`, the tokens generated after it
    or both: without `include_first`, position 0 (the attention sink) and the prompt's special
    tokens are left alone."""
    if where not in get_args(Where):
        raise ValueError(f"where={where!r}: choose 'all', 'prompt' or 'generated'")
    n = len(ids)
    start, stop = {"all": (0, None), "prompt": (0, n), "generated": (n, None)}[where]
    if include_first or where == "generated":
        return start, stop, ()
    specials = special_ids(tokenizer)
    return 1, stop, tuple(p for p in range(1, n) if ids[p] in specials)


@torch.no_grad()
def sweep_tokens(
    lm,
    ids: Sequence[int],
    vec: SteeringVector,
    strengths: Sequence[float],
    tokens: Sequence[int],
    should_stop: cancel.ShouldStop = None,
    include_first: bool = False,
) -> torch.Tensor:
    """(S, K) probabilities of `tokens` after the last of `ids` at each strength, steering the
    prompt (`steer_span`): batched forwards with one Steer per row, as many rows in each as fit
    SWEEP_TOKENS positions (all of them for a short prompt; memory bounded for a long one).
    `should_stop` is asked before each block of each batch."""
    strengths = check_strengths(strengths)
    tokens = [check_token(t, lm.config.vocab_size) for t in tokens]
    ids = list(ids)
    if not 1 <= len(ids) <= lm.config.context_length:
        raise ValueError(f"the prompt must have 1..{lm.config.context_length} tokens, got {len(ids)}")
    start, _, skip = steer_span(lm.tokenizer, ids, "all", include_first)
    per, out = max(1, SWEEP_TOKENS // len(ids)), []
    for first in range(0, len(strengths), per):
        part = strengths[first : first + per]
        batch = torch.tensor([ids] * len(part), device=lm.device)  # (rows, T)
        edits = [vec.edit(s, start, row=r, skip=skip) for r, s in enumerate(part) if start < len(ids)]
        h = lm.model.hidden(batch, edits=edits, should_stop=should_stop)[:, -1]  # (rows, D)
        out.append(lm.model.unembed(h).float().softmax(-1)[:, tokens].cpu())
    return torch.cat(out)  # (S, K)


def sweep(
    lm,
    ids: Sequence[int],
    vec: SteeringVector,
    strengths: Sequence[float],
    token: int,
    should_stop: cancel.ShouldStop = None,
    include_first: bool = False,
) -> torch.Tensor:
    """(S,) probability of `token` after the last of `ids` at each strength (`sweep_tokens`)."""
    return sweep_tokens(lm, ids, vec, strengths, [token], should_stop, include_first)[:, 0]


def steered_pair(
    lm,
    prompt: str,
    vec: SteeringVector,
    strength: float,
    seed: int = 0,
    max_new_tokens: int = 40,
    temperature: float = 1.0,
    top_p: float = 1.0,
    where: Where = "all",
    should_stop: cancel.ShouldStop = None,
    include_first: bool = False,
) -> tuple[str, str]:
    """Text generated without and with the steering (positions as `steer_span` says), same seed
    and settings; `should_stop` is asked before every token of both."""
    plain = generate(lm, prompt, max_new_tokens, temperature, top_p=top_p, seed=seed, should_stop=should_stop)
    start, stop, skip = steer_span(lm.tokenizer, plain.prompt.ids, where, include_first)
    edits = [vec.edit(strength, start, stop, skip=skip)] if stop is None or start < stop else []
    steered = generate(
        lm, prompt, max_new_tokens, temperature, top_p=top_p, seed=seed, edits=edits, should_stop=should_stop
    )
    return _text(plain), _text(steered)


def _text(gen) -> str:
    text = ""
    for step in gen:
        text = step.text_so_far
    return text
