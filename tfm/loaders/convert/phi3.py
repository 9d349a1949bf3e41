"""Phi-3: Llama's block with a fused qkv projection (rows [q | k | v], tfm's own layout) and a
fused gate/up projection (rows [gate | up]); a `sliding_window` applies to every layer."""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from ...core.validate import check_int
from . import llama
from .common import Weights, load_family


def fields(data: dict, source: str) -> tuple[dict, dict]:
    kwargs, meta = llama.fields(data, source, family="phi3")
    window = data.get("sliding_window")
    if (
        window is not None
        and check_int(f"{source}: sliding_window", window, 1, hint=" (or null)") < kwargs["context_length"]
    ):
        kwargs.update(sliding_window=window, local_layers=tuple(range(kwargs["n_layer"])))
    return kwargs, meta


def convert(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    d, f, kv = cfg.d_model, cfg.d_ff, cfg.n_kv_head * cfg.d_head
    out = llama.outer_weights(w, cfg)
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        out[ours + "attn.qkv.weight"] = w.take(hf + "self_attn.qkv_proj.weight", cfg.d_attn + 2 * kv, d)
        out[ours + "attn.proj.weight"] = w.take(hf + "self_attn.o_proj.weight", d, cfg.d_attn)
        gate, up = w.take(hf + "mlp.gate_up_proj.weight", 2 * f, d).split(f)
        out[ours + "mlp.gate.weight"], out[ours + "mlp.fc.weight"] = gate, up
        out[ours + "mlp.proj.weight"] = w.take(hf + "mlp.down_proj.weight", d, f)
        out[ours + "ln1.weight"] = w.take(hf + "input_layernorm.weight", d)
        out[ours + "ln2.weight"] = w.take(hf + "post_attention_layernorm.weight", d)
    return out


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, convert, llama.ignore)
