"""Typed reads of a `Trace`, so the app never spells a trace name.

Pages and `ui/` ask for "layer 3's attention pattern" or "the logits at the last position",
not for `blocks.3.attn.pattern`: the names are the engine's business (`tfm.trace` documents
them) and may change. Every function reads batch element 0 unless it takes `batch`. Reads
go through `Trace.__getitem__`, so lazy entries are computed once, on first read.
"""
from __future__ import annotations

import torch

from .trace import Trace

NORMS = ("ln1", "ln2", "ln_final")


def _block(layer: int, name: str) -> str:
    return f"blocks.{layer}.{name}"


def pattern(trace: Trace, layer: int, batch: int = 0) -> torch.Tensor:
    """Attention weights of every head of `layer`: (H, T, S), rows sum to 1."""
    return trace[_block(layer, "attn.pattern")][batch]


def last_query_rows(trace: Trace) -> torch.Tensor:
    """Every layer's attention rows of the last query: (L, H, S), one layer read at a time."""
    return torch.stack([pattern(trace, i)[:, -1, :] for i in range(trace.n_layers())])


def residual_stream(trace: Trace, index: int, batch: int = 0) -> torch.Tensor:
    """The residual stream after the embedding (index 0) or after block index-1: (T, D)."""
    if not 0 <= index <= trace.n_layers():
        raise ValueError(f"residual stream {index} does not exist: 0 (embedding) to {trace.n_layers()}")
    name = _block(0, "resid_pre") if index == 0 else _block(index - 1, "resid_post")
    return trace[name][batch]


def sublayer_output(trace: Trace, layer: int, which: str, batch: int = 0) -> torch.Tensor:
    """What block `layer`'s attention ("attn") or MLP ("mlp") adds to the stream: (T, D)."""
    if which not in ("attn", "mlp"):
        raise ValueError(f"which={which!r}: choose 'attn' or 'mlp'")
    return trace[_block(layer, f"{which}_out")][batch]


def norm_entry(trace: Trace, layer: int, which: str, part: str, batch: int = 0) -> torch.Tensor:
    """One recorded tensor of a norm: part is input, output (T, D), or mean, std, rms (T,)."""
    if which not in NORMS:
        raise ValueError(f"which={which!r}: choose one of {NORMS}")
    name = f"ln_final.{part}" if which == "ln_final" else _block(layer, f"{which}.{part}")
    return trace[name][batch]


def has_norm_entry(trace: Trace, which: str, part: str) -> bool:
    """Whether the trace records `part` (e.g. std: LayerNorm only; rms: RMSNorm only)."""
    return (f"ln_final.{part}" if which == "ln_final" else _block(0, f"{which}.{part}")) in trace


def logits_at(trace: Trace, pos: int, batch: int = 0) -> torch.Tensor:
    """The logits (V,) predicted at position `pos` (negative counts from the end)."""
    return trace["logits"][batch, pos]


def cross_pattern(trace: Trace, layer: int, batch: int = 0) -> torch.Tensor:
    """Encoder-decoder traces (`tfm.encdec`): decoder `layer`'s cross-attention, (H, T, S)."""
    return trace[f"dec.blocks.{layer}.cross.pattern"][batch]


def split_name(name: str) -> tuple[int | None, str]:
    """A trace name as (block index, name inside the block), or (None, name) outside blocks."""
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None, name


# ---- stop-gap until Trace has `.to` and `.nbytes` (engine branch h13e); same semantics ----

def moved(trace: Trace, device: str | torch.device, dtype: torch.dtype) -> Trace:
    """A copy of the trace on `device` in `dtype`; lazy entries stay lazy (moved when read)."""
    from .trace import Deferred

    def move(value):
        if isinstance(value, Deferred):
            return Deferred(lambda c=value.compute: c().to(device, dtype))
        return value.to(device, dtype)
    return Trace({k: move(v) for k, v in trace._tensors.items()}, trace.shapes)


def nbytes(trace: Trace) -> int:
    """Bytes of the tensors the trace holds now (lazy entries not yet read count 0)."""
    from .trace import Deferred
    return sum(v.numel() * v.element_size() for v in trace._tensors.values() if not isinstance(v, Deferred))
