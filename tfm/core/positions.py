"""Positions: how GPT builds and reads its position information (`add_embeddings`,
`position_inputs`) and the sinusoidal table. What the positional-encoding page computes from
them lives in tfm.analysis.positions."""

from __future__ import annotations

import torch
import torch.nn as nn

from .config import ModelConfig
from .rope import base_inv_freq, rope_angles
from .rope import inv_freq as rope_inv_freq


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)). (T, D)"""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    inv = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
    return table.float()


def _on_meta() -> bool:
    """Whether modules are being built on the meta device (`with torch.device("meta")`: a loader
    fills them, or only their shapes are wanted). Nothing is computed for them then: there are no
    values, and some meta ops (normal_, division) import torch._dynamo, seconds once a process."""
    return torch.empty(0).is_meta


def _embedding(n: int, d: int) -> nn.Embedding:
    return nn.Embedding(n, d, _weight=torch.empty(n, d)) if _on_meta() else nn.Embedding(n, d)


def add_embeddings(module: nn.Module, cfg: ModelConfig) -> None:
    """The token embedding and `cfg`'s position modules, on `module` (GPT, or a model that
    embeds as it does): tok_emb, pos_emb (learned positions, else None), and the pos_table
    (sinusoidal) or inv_freq (RoPE) buffer."""
    module.tok_emb = _embedding(cfg.vocab_size, cfg.d_model)
    module.pos_emb = _embedding(cfg.context_length, cfg.d_model) if cfg.pos_encoding == "learned" else None
    meta = _on_meta()
    if cfg.pos_encoding == "sinusoidal":
        table = (
            torch.empty(cfg.context_length, cfg.d_model) if meta else sinusoidal_table(cfg.context_length, cfg.d_model)
        )
        module.register_buffer("pos_table", table, persistent=False)
    if cfg.pos_encoding == "rope":
        freq = torch.empty(cfg.rotary_dim // 2) if meta else rope_inv_freq(cfg)
        module.register_buffer("inv_freq", freq, persistent=False)  # (rotary_dim/2,)
    if cfg.pos_encoding == "rope" and cfg.rope_local_base is not None:
        module.register_buffer(
            "local_inv_freq", torch.empty(cfg.rotary_dim // 2) if meta else local_inv_freq(cfg), persistent=False
        )


def local_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Local (sliding-window) layers' RoPE inverse frequencies, base `rope_local_base`, unscaled
    (Gemma 3's "sliding_attention" RoPE parameters: the default type). (rotary_dim/2,)"""
    return base_inv_freq(cfg.rope_local_base, cfg.rotary_dim)


def local_angles(module: nn.Module, start, length: int, rec=None):
    """RoPE angles of local layers when their base differs ((T, rd/2), per row with a (B,) start
    as `position_inputs`), recorded as "rope.local_angles"; None when every layer shares one RoPE."""
    freq = getattr(module, "local_inv_freq", None)
    if freq is None:
        return None
    if isinstance(start, torch.Tensor):
        pos = start[:, None] + torch.arange(length, device=start.device)  # (B, T)
        return (pos.to(freq.dtype)[..., None] * freq)[:, None]  # (B, 1, T, rd/2)
    angles = rope_angles(freq, start, length)  # (T, rd/2)
    if rec is not None:
        rec.add("rope.local_angles", angles)
    return angles


def position_inputs(module: nn.Module, start: int, length: int):
    """Position information for positions start..start+length-1 of a module set up by
    `add_embeddings`: (added vectors (T, D) or None, RoPE angles (T, rotary_dim/2) or None).
    The one place that reads pos_emb / pos_table / inv_freq. `start` may be a (B,) tensor, one
    start per batch row (a ragged batch): then (B, T, D) vectors and (B, 1, T, rotary_dim/2) angles."""
    if isinstance(start, torch.Tensor):
        return _row_positions(module, start, length)
    if module.pos_emb is not None:
        return module.pos_emb(torch.arange(start, start + length, device=module.pos_emb.weight.device)), None
    if module.config.pos_encoding == "sinusoidal":
        return module.pos_table[start : start + length], None  # (T, D)
    if module.config.pos_encoding == "rope":
        return None, rope_angles(module.inv_freq, start, length)  # (T, rotary_dim/2)
    return None, None


def _row_positions(module: nn.Module, start: torch.Tensor, length: int):
    """position_inputs with one start per row; each row's values equal the int-start ones."""
    pos = start[:, None] + torch.arange(length, device=start.device)  # (B, T)
    if module.pos_emb is not None:
        return module.pos_emb(pos), None  # (B, T, D)
    if module.config.pos_encoding == "sinusoidal":
        return module.pos_table[pos], None  # (B, T, D)
    if module.config.pos_encoding == "rope":
        angles = pos.to(module.inv_freq.dtype)[..., None] * module.inv_freq  # (B, T, rd/2)
        return None, angles[:, None]  # (B, 1, T, rd/2)
    return None, None
