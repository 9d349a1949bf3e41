"""When a traced forward is lazy (`tfm.core.lazy`), and what `keep` may ask it to store: the
options of `GPT.forward(..., trace=True)` checked in one place."""

from __future__ import annotations

import torch
from torch import nn

from .trace_cost import estimate_trace_bytes
from .trace_names import NAMES
from .validate import check_int


def prefer_lazy(config, length: int, eager_bytes: int, batch: int = 1) -> bool:
    """Whether a trace of `length` positions is better lazy: when its eager trace with every
    entry read (`estimate_trace_bytes`) is over `eager_bytes`. Under it an eager trace is
    cheaper for a reader of every block (a lazy forward runs each block once, reading its
    pattern runs it again: ~2x the eager trace for a short prompt) and its memory is small."""
    return estimate_trace_bytes(config, length, batch) > check_int("eager_bytes", eager_bytes, 0, hint=" (bytes)")


def use_lazy(model: nn.Module, lazy: bool | None, cache, keep: tuple[str, ...] = ()) -> bool:
    """Lazy by default for inference without a KV cache; eager with a cache, in training mode
    or with autograd on (a caller that differentiates wants today's trace). `keep` asks for a lazy one."""
    if keep:
        if lazy is False:
            raise ValueError(
                "keep says what a lazy trace stores; an eager one (lazy=False) stores everything: drop keep"
            )
        lazy = True
    if lazy is None:
        return cache is None and not model.training and not torch.is_grad_enabled()
    if lazy and (cache is not None or model.training):
        raise ValueError(
            "a lazy trace recomputes blocks from their inputs: it needs eval mode and "
            "no KV cache; pass lazy=False (or leave lazy unset) for those"
        )
    return lazy


def wanted(
    model: nn.Module, trace: bool, lazy: bool | None, keep: tuple[str, ...], cache, edits, attention_mask
) -> bool:
    """Whether `GPT.forward(..., trace=trace, lazy=lazy, keep=keep, ...)` returns a lazy trace; the
    options that contradict each other raise ValueError. Edits and a padded batch trace eagerly."""
    if not trace:
        if lazy or keep:
            raise ValueError("lazy and keep describe a trace: pass trace=True as well")
        return False
    if attention_mask is not None and (lazy or keep):
        raise ValueError("a padded batch is traced eagerly: leave lazy and keep unset with attention_mask")
    if edits and (lazy or keep):
        raise ValueError("an edited forward is traced eagerly: leave lazy and keep unset with edits")
    return not edits and attention_mask is None and use_lazy(model, lazy, cache, keep)


# Block entries `keep` may store in the main pass: those the forward records as tensors
# (`attn.result` and the norms' `normalized` are derived when read; `resid_pre` is always stored).
KEEPABLE = (
    "q",
    "k",
    "v",
    "scores",
    "pattern",
    "z",
    "attn_out",
    "resid_mid",
    "mlp_pre",
    "mlp_up",
    "mlp_post",
    "mlp_out",
    "resid_post",
)


def kept_suffixes(keep: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`keep` (concepts of `tfm.core.trace_names.NAMES`, e.g. ("pattern",)) -> name suffixes, validated."""
    if isinstance(keep, str) or not all(isinstance(c, str) for c in keep):
        raise ValueError(f"keep must be a tuple of concept names such as ('pattern',), got {keep!r}")
    unknown = [c for c in keep if c not in KEEPABLE]
    if unknown:
        raise ValueError(f"keep={unknown}: a lazy trace can store only these block entries: {KEEPABLE}")
    return tuple(NAMES[c].removeprefix("blocks.{layer}") for c in keep)  # ".attn.pattern", ...
