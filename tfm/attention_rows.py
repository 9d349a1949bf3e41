"""Attention weights of a few query rows, straight from a trace's stored block input.

A page that shows a 64-position window of a 1024-token prompt needs 64 rows of a layer's
pattern, not the whole (H, 1024, 1024) block that a lazy trace would recompute (with its MLP)
when a different layer is picked: ~0.5 s for GPT-2 small on one CPU thread. Here only the
window's queries and the keys up to its last position are projected, with the block's own
norm, weights, RoPE and `attention_scores`, so the rows equal the trace's pattern rows up to
float rounding (tests/test_attention_rows.py compares them).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import GPT, apply_rope, attention_scores, causal_mask, rope_angles
from .trace import Trace, name


@torch.inference_mode()
def pattern_rows(model: GPT, trace: Trace, layer: int, start: int, stop: int, batch: int = 0) -> torch.Tensor:
    """Rows `start..stop-1` of block `layer`'s attention pattern over keys `0..stop-1`:
    (H, stop - start, stop), float32 on the CPU. Keys after a query get exactly 0."""
    cfg = model.config
    if not 0 <= layer < cfg.n_layer:
        raise ValueError(f"layer {layer} does not exist; the model has {cfg.n_layer} blocks")
    x = trace[name("resid_pre", layer)][batch]                         # (T, D)
    if not 0 <= start < stop <= x.shape[0]:
        raise ValueError(f"rows {start}..{stop - 1} are outside the prompt's {x.shape[0]} positions")
    block, p = model.blocks[layer], next(model.parameters())
    x = x[:stop].to(p.device, p.dtype)                                 # (S, D)
    a_in = block.ln1(x) if block.pre else x                            # post-norm: ln1 follows attention
    w, b, d = block.attn.qkv.weight, block.attn.qkv.bias, cfg.d_model
    q = F.linear(a_in[start:], w[:d], None if b is None else b[:d])    # (T, D) for the window's queries
    k = F.linear(a_in, w[d:2 * d], None if b is None else b[d:2 * d])  # (S, D)
    q = q.view(-1, cfg.n_head, cfg.d_head).transpose(0, 1)             # (H, T, hd)
    k = k.view(-1, cfg.n_head, cfg.d_head).transpose(0, 1)             # (H, S, hd)
    if cfg.pos_encoding == "rope":
        angles = rope_angles(model.inv_freq, 0, stop)                  # (S, hd/2)
        q, k = apply_rope(q, angles[start:]), apply_rope(k, angles)
    mask = causal_mask(stop - start, stop, x.device)                   # queries are the last rows
    return attention_scores(q, k, mask).softmax(-1).float().cpu()      # (H, T, S)
