"""Reads of a `Trace` that its typed accessors (`Trace.pattern`, `residual_streams`,
`norm_stats`, `logits_at`, ...) do not cover, so pages and `ui/` never spell a trace name.

The names are the engine's business (`tfm.trace.NAMES`); everything here builds them from there.
"""

from __future__ import annotations

import torch

from .config import ModelConfig
from .functional import expand_kv
from .trace import Trace, name


def cross_pattern(trace: Trace, layer: int, batch: int = 0) -> torch.Tensor:
    """Encoder-decoder traces (`tfm.teach.encdec`): decoder `layer`'s cross-attention, (H, T, S)."""
    return trace[f"dec.blocks.{layer}.cross.pattern"][batch]


def split_name(full: str) -> tuple[int | None, str]:
    """A trace name as (block index, name inside the block), or (None, name) outside blocks."""
    parts = full.split(".", 2)
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        return int(parts[1]), parts[2]
    return None, full


def kv_per_query_head(trace: Trace, which: str, layer: int, n_head: int, batch: int = 0) -> torch.Tensor:
    """Block `layer`'s keys ("k") or values ("v") repeated for the query heads that read them,
    (n_head, S, hd): row h is key/value head h // (n_head / n_kv_head) (`expand_kv`). The trace
    stores them per key/value head; indexing that with a query head is the grouped-query bug."""
    if which not in ("k", "v"):
        raise ValueError(f"which={which!r}: choose 'k' or 'v'")
    x = trace[name(which, layer)][batch]  # (Hkv, S, hd)
    if n_head % x.shape[0]:
        raise ValueError(f"n_head={n_head} is not a multiple of the trace's {x.shape[0]} key/value heads")
    return expand_kv(x, n_head // x.shape[0])  # (H, S, hd)


def head_qkv(trace: Trace, config: ModelConfig, layer: int, head: int, batch: int = 0):
    """Query head `head`'s q, and the k and v it reads (its key/value head, `config.kv_head`):
    (T, hd), (S, hd), (S, hd), RoPE applied to q and k as in the forward."""
    g = config.kv_head(head)
    q, k, v = (trace[name(n, layer)][batch] for n in "qkv")
    return q[head], k[g], v[g]
