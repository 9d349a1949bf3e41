"""Attention weights of a few query rows, straight from a trace's stored block input.

A page that shows a 64-position window of a 1024-token prompt needs 64 rows of a layer's
pattern, not the whole (H, 1024, 1024) block that a lazy trace would recompute (with its MLP)
when a different layer is picked (slow for GPT-2 small on one CPU thread). Here only the
window's queries and the keys up to its last position are used, through the block's own
norm, `split_qkv` (heads, QK-norm, RoPE), the trace's stored angles (a local layer's own), its
window and `attention_scores`, so the rows equal the trace's pattern rows up to
float rounding (tests/test_attention_rows.py compares them).
"""

from __future__ import annotations

import torch

from ..core.model import GPT, attention_scores, causal_mask
from ..core.trace import Trace
from ..core.trace_names import name
from ..core.window import attention_mask


@torch.inference_mode()
def pattern_rows(model: GPT, trace: Trace, layer: int, start: int, stop: int, batch: int = 0) -> torch.Tensor:
    """Rows `start..stop-1` of block `layer`'s attention pattern over keys `0..stop-1`:
    (H, stop - start, stop), float32 on the CPU. Keys after a query get exactly 0. An encoder's
    rows are softmaxed over every key of the prompt (they see them all), then cut to `0..stop-1`."""
    cfg = model.config
    if not 0 <= layer < cfg.n_layer:
        raise ValueError(f"layer {layer} does not exist; the model has {cfg.n_layer} blocks")
    x = trace[name("resid_pre", layer)][batch]  # (T, D)
    if not 0 <= start < stop <= x.shape[0]:
        raise ValueError(f"rows {start}..{stop - 1} are outside the prompt's {x.shape[0]} positions")
    block, p = model.blocks[layer], next(model.parameters())
    n_keys = stop if cfg.causal else x.shape[0]  # an encoder's rows read every key
    x = x[:n_keys].to(p.device, p.dtype)[None]  # (1, S, D)
    a_in = block.ln1(x) if block.pre else x  # post-norm: ln1 follows attention
    window, scale = block.attn.window, block.attn.scale
    angles = _angles(trace, window)[:n_keys].to(p.device) if cfg.pos_encoding == "rope" else None  # (S, rd/2)
    # the block's own projection and head split (grouped-query, partial rotary, QK-norm, RoPE as in the forward)
    q, k, _ = block.attn.split_qkv(block.attn.qkv(a_in), angles)  # (1, H, S, hd), (1, Hkv, S, hd)
    if not cfg.causal:
        return attention_scores(q[:, :, start:stop], k, None, scale)[0].softmax(-1)[..., :stop].float().cpu()
    # queries are the last rows; a local layer's reach only its window (keys further back get exactly 0)
    mask = attention_mask(causal_mask(stop - start, stop, x.device), stop - start, stop, window, x.device)
    return attention_scores(q[:, :, start:], k, mask, scale)[0].softmax(-1).float().cpu()  # (H, T, S)


def _angles(trace: Trace, window: int | None) -> torch.Tensor:
    """The RoPE angles a layer used: a local layer's own base when the model has one (Gemma 3)."""
    return (
        trace["rope.local_angles"]
        if window is not None and "rope.local_angles" in trace
        else trace[name("rope_angles")]
    )
