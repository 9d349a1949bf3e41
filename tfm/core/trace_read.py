"""Reads of a `Trace` that its typed accessors (`Trace.pattern`, `residual_streams`,
`norm_stats`, `logits_at`, ...) do not cover, so pages and `ui/` never spell a trace name.

The names are the engine's business (`tfm.trace.NAMES`); everything here builds them from there.
"""
from __future__ import annotations

import torch

from .trace import Trace, name


def sublayer_output(trace: Trace, layer: int, which: str, batch: int = 0) -> torch.Tensor:
    """What block `layer`'s attention ("attn") or MLP ("mlp") adds to the stream: (T, D)."""
    if which not in ("attn", "mlp"):
        raise ValueError(f"which={which!r}: choose 'attn' or 'mlp'")
    return trace[name(f"{which}_out", layer)][batch]


def cross_pattern(trace: Trace, layer: int, batch: int = 0) -> torch.Tensor:
    """Encoder-decoder traces (`tfm.teach.encdec`): decoder `layer`'s cross-attention, (H, T, S)."""
    return trace[f"dec.blocks.{layer}.cross.pattern"][batch]


def split_name(full: str) -> tuple[int | None, str]:
    """A trace name as (block index, name inside the block), or (None, name) outside blocks."""
    parts = full.split(".", 2)
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None, full

