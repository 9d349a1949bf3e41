"""Reads of a `Trace` that its typed accessors (`Trace.pattern`, `residual_streams`,
`norm_stats`, `logits_at`, ...) do not cover, so pages and `ui/` never spell a trace name.

The names are the engine's business (`tfm.trace.NAMES`); everything here builds them from there.
"""
from __future__ import annotations

import torch

from .trace import Deferred, Trace, name


def sublayer_output(trace: Trace, layer: int, which: str, batch: int = 0) -> torch.Tensor:
    """What block `layer`'s attention ("attn") or MLP ("mlp") adds to the stream: (T, D)."""
    if which not in ("attn", "mlp"):
        raise ValueError(f"which={which!r}: choose 'attn' or 'mlp'")
    return trace[name(f"{which}_out", layer)][batch]


def cross_pattern(trace: Trace, layer: int, batch: int = 0) -> torch.Tensor:
    """Encoder-decoder traces (`tfm.encdec`): decoder `layer`'s cross-attention, (H, T, S)."""
    return trace[f"dec.blocks.{layer}.cross.pattern"][batch]


def split_name(full: str) -> tuple[int | None, str]:
    """A trace name as (block index, name inside the block), or (None, name) outside blocks."""
    parts = full.split(".", 2)
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None, full


# ---- stop-gap until Trace has `.to` and `.nbytes` (engine branch h13e); same semantics ----

def moved(trace: Trace, device: str | torch.device, dtype: torch.dtype) -> Trace:
    """A copy of the trace on `device` in `dtype`; lazy entries stay lazy (moved when read)."""
    def move(value):
        if isinstance(value, Deferred):
            return Deferred(lambda c=value.compute: c().to(device, dtype))
        return value.to(device, dtype)
    return Trace({k: move(v) for k, v in trace._tensors.items()}, trace.shapes)


def nbytes(trace: Trace) -> int:
    """Bytes of the tensors the trace holds now (lazy entries not yet read count 0)."""
    return sum(v.numel() * v.element_size() for v in trace._tensors.values() if not isinstance(v, Deferred))
