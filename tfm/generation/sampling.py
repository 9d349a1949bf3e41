"""Next-token sampling: temperature, top-k and top-p, as pure functions on tensors.

The web app lets students move temperature / top-k / top-p sliders and watch the
next-token distribution change, so what we show must be exactly what a real
``model.generate(do_sample=True)`` would sample from. We therefore follow the
Hugging Face warpers (``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper`` in ``transformers/generation/logits_process.py``) in both
semantics and order:

    logits --(divide by T)--> scaled --(top-k)--> --(top-p on what top-k kept)--> final

Everything works over the FULL vocabulary. Truncating to a top-50 before
applying top-p (as some visualisers do) changes which tokens cross the top-p
threshold and misreports the probability mass that was cut away.

Shapes: every function accepts logits of shape ``(V,)`` or ``(..., V)`` (a
leading batch dimension) and works along the last axis. Inputs may be float32,
float16 or bfloat16 on any device; all arithmetic is done in float32 on the
input's device, because half-precision softmax/cumsum misplaces the top-p cut.

Temperature 0 is *greedy*, an explicit mode rather than a division by zero: the
argmax (lowest index on ties, like ``torch.argmax``) is the only token kept and
top-k / top-p are ignored, since the argmax always survives both anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.stats import entropy
from ..core.validate import check_int, check_number

__all__ = [
    "SamplingSettings",
    "Breakdown",
    "apply_temperature",
    "top_k_mask",
    "top_p_mask",
    "filter_mask",
    "breakdown",
    "sample",
    "usable_settings",
    "mask_padding",
    "next_token",
    "draw",
]


# --------------------------------------------------------------------------- #
# Settings and validation
# --------------------------------------------------------------------------- #


def _check_temperature(temperature: float) -> float:
    return check_number("temperature", temperature, low=0, hint=" (0 means greedy; e.g. 0, 0.7 or 1.0)")


def _check_top_k(top_k: int) -> int:
    return check_int("top_k", top_k, 0, hint=" (0 turns top-k off)")


def _check_top_p(top_p: float) -> float:
    return check_number("top_p", top_p, 0, 1, hint=" (1 turns top-p off, 0 keeps only the top token)")


@dataclass(frozen=True)
class SamplingSettings:
    """The three slider values, validated once so every later step can trust them.

    ``temperature`` >= 0 (0 = greedy), ``top_k`` >= 0 (0 = off), ``top_p`` in
    [0, 1] (1 = off). Values are normalised to float/int/float.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        # Frozen dataclass: normalise types through object.__setattr__.
        object.__setattr__(self, "temperature", _check_temperature(self.temperature))
        object.__setattr__(self, "top_k", _check_top_k(self.top_k))
        object.__setattr__(self, "top_p", _check_top_p(self.top_p))

    @property
    def greedy(self) -> bool:
        """True when temperature is 0: always pick the argmax, never draw at random."""
        return self.temperature == 0.0


def _as_float32(logits: torch.Tensor) -> torch.Tensor:
    """Validate logits and upcast to float32 (half-precision cumsums misplace the top-p cut)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError("logits must be a tensor of shape (V,) or (..., V) with V >= 1")
    if not (logits.is_floating_point()):
        raise ValueError(f"logits must be floating point (float32/float16/bfloat16), got {logits.dtype}")
    x = logits.to(torch.float32)
    # NaN, +inf, or a row with no finite value would all turn the softmax into NaN and silently
    # corrupt the chart. Each makes its row's max non-finite (a max propagates NaN): one pass
    # over the logits and one device sync, where three checks took far longer.
    if not bool(torch.isfinite(x.amax(dim=-1)).all()):
        raise ValueError("logits must not contain NaN or +inf, and each row needs at least one finite value")
    return x


# --------------------------------------------------------------------------- #
# The three filters
# --------------------------------------------------------------------------- #


def apply_temperature(logits: torch.Tensor, t: float) -> torch.Tensor:
    """Divide logits by the temperature ``t`` (float32 result, same shape).

    ``t == 0`` means greedy decoding. Rather than dividing by zero (which would
    give inf/NaN), the logits are returned unchanged (as float32) and the mask
    code (:func:`filter_mask`) keeps only the argmax. Negative or non-finite
    ``t`` raises ValueError.
    """
    t = _check_temperature(t)
    x = _as_float32(logits)
    return x if t == 0.0 else x / t


def top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask (True = kept) of the ``k`` highest logits, over the full vocabulary.

    Matches HF ``TopKLogitsWarper``: a token is kept iff its logit is >= the
    k-th largest value, so ties at the k-th value keep *all* the tied tokens
    (more than ``k`` may survive). ``k == 0`` turns the filter off; ``k`` larger
    than the vocabulary is clamped to it.
    """
    return _top_k(_as_float32(logits), _check_top_k(k))


def _top_k(x: torch.Tensor, k: int) -> torch.Tensor:
    """`top_k_mask` of validated float32 logits."""
    if k == 0:
        return torch.ones_like(x, dtype=torch.bool)
    k = min(k, x.shape[-1])
    kth = torch.topk(x, k, dim=-1).values[..., -1:]  # (..., 1)
    return x >= kth  # (..., V)


def top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Bool mask (True = kept) of the smallest top set whose probability reaches ``p``.

    The token whose probability makes the running total cross ``p`` is kept, and
    at least one token always survives. This follows HF ``TopPLogitsWarper``
    arithmetic exactly: sort ascending, softmax, cumulative sum, remove the
    tokens whose cumulative probability is <= 1 - p, keep the last (largest)
    one regardless. ``p == 1`` turns the filter off (every token kept, even those
    whose probability underflows to 0). ``p == 0`` keeps exactly one token.

    Ties: HF uses an unstable sort, so which of several equal-probability tokens
    survives a cut is unspecified there. Here the ascending order is the reverse
    of a *stable* descending sort, so among equal logits the lowest index ranks
    highest: it is the one kept when a cut falls inside a tie (for ``p == 0``
    that is the same token ``torch.argmax`` picks).
    """
    return _top_p(_as_float32(logits), _check_top_p(p))


def _top_p(x: torch.Tensor, p: float) -> torch.Tensor:
    """`top_p_mask` of validated float32 logits."""
    if p == 1.0:
        return torch.ones_like(x, dtype=torch.bool)
    order = torch.sort(x, dim=-1, descending=True, stable=True).indices.flip(-1)  # (..., V) ascending
    sorted_logits = torch.gather(x, -1, order)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1.0 - p)
    remove_sorted[..., -1] = False  # min_tokens_to_keep = 1: the top token always survives
    remove = torch.empty_like(remove_sorted).scatter_(-1, order, remove_sorted)  # back to vocab order
    return ~remove


def _greedy_mask(x: torch.Tensor) -> torch.Tensor:
    """One-hot bool mask on the argmax (first maximal index on ties, as torch.argmax)."""
    idx = x.argmax(dim=-1, keepdim=True)  # (..., 1)
    return torch.zeros_like(x, dtype=torch.bool).scatter_(-1, idx, True)


def _masks(scaled: torch.Tensor, settings: SamplingSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept_after_top_k, kept) for already temperature-scaled float32 logits, in HF order."""
    if settings.greedy:
        one_hot = _greedy_mask(scaled)
        return one_hot, one_hot
    kept_k = _top_k(scaled, settings.top_k)
    if settings.top_p == 1.0:  # top-p off: it keeps what top-k kept (a copy: the two fields stay apart)
        return kept_k, kept_k.clone()
    # Top-p sees the distribution renormalised over what top-k kept, as in HF,
    # where TopK has already written -inf into the removed logits.
    kept_p = _top_p(scaled if settings.top_k == 0 else scaled.masked_fill(~kept_k, -math.inf), settings.top_p)
    return kept_k, kept_k & kept_p


def filter_mask(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Bool mask (True = kept) after temperature, then top-k, then top-p (HF order).

    Greedy settings keep only the argmax (lowest index on ties).
    """
    scaled = apply_temperature(logits, settings.temperature)
    return _masks(scaled, settings)[1]


# --------------------------------------------------------------------------- #
# Breakdown: everything the UI plots
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Breakdown:
    """Every stage of the pipeline, each over the full vocabulary (float32, input's device).

    Per-vocabulary fields have the input's shape ``(V,)`` or ``(..., V)``;
    per-row scalars (masses, entropies, n_kept) have the leading shape, i.e.
    0-dim tensors for a 1-D input (use ``.item()``).
    """

    logits: torch.Tensor  # the float32 logits everything below comes from
    probs: torch.Tensor  # softmax of the raw logits (T = 1)
    probs_t: torch.Tensor  # softmax after temperature; one-hot on the argmax when greedy
    kept_after_top_k: torch.Tensor  # bool, survivors of top-k (before top-p)
    kept: torch.Tensor  # bool, survivors of top-k and top-p
    final: torch.Tensor  # probs_t renormalised over kept, exact zeros elsewhere
    mass_removed_top_k: torch.Tensor  # probability (under probs_t) cut by top-k
    mass_removed_top_p: torch.Tensor  # probability (under probs_t) cut by top-p, among top-k survivors
    entropy_before: torch.Tensor  # entropy of probs, nats
    entropy_after: torch.Tensor  # entropy of final, nats
    n_kept: torch.Tensor  # int64, number of kept tokens
    settings: SamplingSettings


def _log_final(scaled: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Log of the sampling distribution: log_softmax over kept tokens, -inf elsewhere."""
    return torch.log_softmax(scaled.masked_fill(~kept, -math.inf), dim=-1)


def _resolve_settings(
    temperature: float, top_k: int, top_p: float, settings: SamplingSettings | None
) -> SamplingSettings:
    """Use ``settings`` if given, refusing silently conflicting loose arguments."""
    if settings is None:
        return SamplingSettings(temperature, top_k, top_p)
    if (temperature, top_k, top_p) != (1.0, 0, 1.0):
        raise ValueError("pass either settings= or temperature/top_k/top_p, not both")
    return settings


def breakdown(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    *,
    settings: SamplingSettings | None = None,
) -> Breakdown:
    """Compute every stage of temperature -> top-k -> top-p for display.

    Masses are measured under ``probs_t`` so that
    ``mass_removed_top_k + mass_removed_top_p + probs_t[kept].sum() == 1``.
    """
    s = _resolve_settings(temperature, top_k, top_p, settings)
    x = _as_float32(logits)
    # Generation runs this on every step for every row (a large share of a 30-row step of a
    # 49152-token vocabulary: docs/benchmarks.md), so each pass over (..., V) is made once and reused where
    # the values are identical: x / 1 is x, and with nothing filtered every mask is all True.
    scaled = x if s.temperature in (0.0, 1.0) else x / s.temperature
    kept_k, kept = _masks(scaled, s)
    log_probs = torch.log_softmax(x, dim=-1)
    probs = x.softmax(dim=-1)
    probs_t = kept.to(torch.float32) if s.greedy else probs if scaled is x else scaled.softmax(dim=-1)
    log_final = _log_final_of(x, scaled, kept, s, log_probs)
    entropy_before = entropy(log_probs=log_probs)
    return Breakdown(
        logits=x,
        probs=probs,
        probs_t=probs_t,  # greedy: one-hot, all mass on the argmax
        kept_after_top_k=kept_k,
        kept=kept,
        final=log_final.exp(),  # exp(-inf) = 0 exactly where removed
        mass_removed_top_k=_mass(probs_t, kept_k, s.top_k == 0 and not s.greedy),
        mass_removed_top_p=_mass(probs_t, ~kept_k | kept, s.top_p == 1.0 and not s.greedy),
        entropy_before=entropy_before,
        entropy_after=entropy_before if log_final is log_probs else entropy(log_probs=log_final),
        n_kept=_n_kept(x, kept, s),
        settings=s,
    )


def _unfiltered(s: SamplingSettings) -> bool:
    """Sampling from the whole tempered distribution: no token is removed."""
    return not s.greedy and s.top_k == 0 and s.top_p == 1.0


def _log_final_of(
    x: torch.Tensor, scaled: torch.Tensor, kept: torch.Tensor, s: SamplingSettings, log_probs: torch.Tensor
) -> torch.Tensor:
    """The final log-probabilities: with nothing filtered the tempered log-softmax (`log_probs`
    itself at temperature 1), else the kept tokens' renormalised."""
    if not _unfiltered(s):
        return _log_final(scaled, kept)
    return log_probs if scaled is x else torch.log_softmax(scaled, dim=-1)


def _n_kept(x: torch.Tensor, kept: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """Tokens kept per row (the whole vocabulary, without counting, when nothing is filtered)."""
    if _unfiltered(s):
        return torch.full(x.shape[:-1], x.shape[-1], dtype=torch.int64, device=x.device)
    return kept.sum(dim=-1)


def _mass(probs: torch.Tensor, spared: torch.Tensor, none_cut: bool) -> torch.Tensor:
    """The probability of the tokens not `spared`, per row (exact zeros when the filter is off)."""
    if none_cut:
        return probs.new_zeros(probs.shape[:-1])
    return probs.masked_fill(spared, 0.0).sum(dim=-1)


# --------------------------------------------------------------------------- #
# Sampling
# --------------------------------------------------------------------------- #


def sample(logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator) -> int | torch.Tensor:
    """Draw a token id from the filtered distribution, using only ``generator``.

    Returns an ``int`` for ``(V,)`` logits, an int64 tensor of the leading shape
    for ``(..., V)``. The global RNG is never used, so concurrent users each with
    their own generator are independent and reproducible. Greedy settings return
    the argmax without touching the generator. The draw happens on the
    generator's device (the probabilities are moved there), so a CPU generator
    gives the same tokens whatever device produced the logits.
    """
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            "sample() needs a torch.Generator (e.g. torch.Generator().manual_seed(0)); the global RNG is never used"
        )
    scaled = apply_temperature(logits, settings.temperature)
    if settings.greedy:
        ids = scaled.argmax(dim=-1)  # (...)
    else:
        kept = _masks(scaled, settings)[1]
        probs = _log_final(scaled, kept).exp()
        flat = probs.reshape(-1, probs.shape[-1]).to(generator.device)  # (B, V); multinomial wants 1-D/2-D
        ids = torch.multinomial(flat, 1, generator=generator)  # (B, 1)
        ids = ids.reshape(probs.shape[:-1]).to(probs.device)  # (...)
    return int(ids.item()) if ids.dim() == 0 else ids


# --------------------------------------------------------------------------- #
# The one pipeline of generation and the next-token page
# --------------------------------------------------------------------------- #


def usable_settings(temperature, top_k, top_p, n_words: int) -> SamplingSettings:
    """Slider values from a link or an earlier page made valid, the same way for every page:
    a temperature that is not a finite number >= 0 becomes 1, top-k is clamped to [0, n_words],
    a top-p outside [0, 1] becomes 1 (off). Values that are not numbers raise ValueError."""
    try:
        t, k, p = float(temperature), int(top_k), float(top_p)
    except (TypeError, ValueError):
        raise ValueError(f"sampling settings must be numbers, got {temperature!r}, {top_k!r}, {top_p!r}") from None
    t = t if math.isfinite(t) and t >= 0 else 1.0
    return SamplingSettings(t, min(max(k, 0), n_words), p if 0.0 <= p <= 1.0 else 1.0)


def mask_padding(logits: torch.Tensor, n_words: int) -> torch.Tensor:
    """(..., V) logits with the rows past the tokenizer's `n_words` ids set to -inf (a copy; the
    input itself when there are none). Padded vocabularies (nanoGPT rounds 50257 up to 50304)
    have rows that are not tokens: they are never drawn and never shown."""
    if n_words >= logits.shape[-1]:
        return logits
    out = logits.clone()
    out[..., n_words:] = -math.inf
    return out


def next_token(logits: torch.Tensor, settings: SamplingSettings, n_words: int) -> Breakdown:
    """The breakdown of one position's next-token choice: padding masked, then temperature,
    top-k, top-p. Generation draws from it (`draw`); the next-token page plots it."""
    return breakdown(mask_padding(logits, n_words), settings=settings)


def draw(bd: Breakdown, generator: torch.Generator) -> int:
    """A token id drawn from `bd.final` with `generator` (on the generator's device, as `sample`
    does): the argmax when greedy, without touching the generator."""
    if bd.settings.greedy:
        return int(bd.final.argmax())  # the one kept token (lowest index on ties)
    return int(torch.multinomial(bd.final.reshape(1, -1).to(generator.device), 1, generator=generator))
