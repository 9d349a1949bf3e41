"""Qwen3: Llama's tensors plus QK-norm (an RMSNorm over each head's query and key, before RoPE),
no qkv biases, and a head size of its own (`head_dim`, often not hidden_size / heads)."""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from ...core.validate import check_int
from . import llama
from .common import Weights, load_family


def fields(data: dict, source: str) -> tuple[dict, dict]:
    head_dim = data.get("head_dim")
    if data.get("use_sliding_window", False):
        raise ValueError(
            f"{source}: use_sliding_window=true is not supported for qwen3 (published Qwen3 models leave it off)"
        )
    kwargs, meta = llama.fields({k: v for k, v in data.items() if k != "head_dim"}, source, family="qwen3")
    if head_dim is not None:
        kwargs["head_dim"] = check_int(f"{source}: head_dim", head_dim, 2, 65_536)
    return dict(kwargs, qk_norm=True), meta


def convert(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    out = llama.convert(w, cfg)
    for i in range(cfg.n_layer):
        a = f"model.layers.{i}.self_attn."
        out[f"blocks.{i}.attn.q_norm.weight"] = w.take(a + "q_norm.weight", cfg.d_head)
        out[f"blocks.{i}.attn.k_norm.weight"] = w.take(a + "k_norm.weight", cfg.d_head)
    return out


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, convert, llama.ignore)
