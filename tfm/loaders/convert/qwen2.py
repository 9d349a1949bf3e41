"""Qwen2 / Qwen2.5: Llama's tensors plus biases on the q, k, v projections (not on o_proj)."""

from __future__ import annotations

from pathlib import Path

from . import llama
from .common import load_family
from .mistral import cap_to_window


def fields(data: dict, source: str) -> tuple[dict, dict]:
    kwargs, meta = llama.fields(data, source, family="qwen2")
    kwargs["qkv_bias"] = True
    if data.get("use_sliding_window", False):  # Qwen2 slides only when asked (layers >= max_window_layers)
        cap_to_window(kwargs, meta, data.get("sliding_window"), source)
    return kwargs, meta


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, llama.convert, llama.ignore)
