"""What GGUF files of `gemma3`, `qwen3` and `phi3` add to the llama layout (`tfm.loaders.gguf`).

- gemma3: a head size of its own (`attention.key_length`), one key/value head for the 270M,
  QK-norm (`attn_q_norm`, `attn_k_norm`), a norm after each sublayer (`post_attention_norm`,
  `post_ffw_norm`; `ffn_norm` is the pre-feedforward one), GeGLU, embeddings times sqrt(d), and
  local layers: llama.cpp's gemma3 (and transformers reading the file) make every sixth layer
  global and the others slide over `attention.sliding_window` keys with RoPE base 10000. Scores
  are scaled by key_length ** -0.5 (llama.cpp's 1/sqrt(n_embd_head_k), transformers' default
  query_pre_attn_scalar 256: equal for the 270M). llama.cpp's converter already stored every
  norm weight as 1 + w, the gain tfm multiplies by. q and k rows are not permuted.
- qwen3: QK-norm and `attention.key_length` heads, no qkv biases, unpermuted.
- phi3: the fused `attn_qkv` (rows [q | k | v], tfm's own) and `ffn_up` holding [gate | up];
  `attention.sliding_window` applies to every layer.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.config import ModelConfig

ARCHS = ("gemma3", "qwen3", "phi3")
GEMMA3_GLOBAL_EVERY = 6  # llama.cpp's and transformers' sliding_window_pattern for Gemma 3
GEMMA3_LOCAL_BASE = 10000.0  # the RoPE base of local layers (rope_local_base_freq)


def config_fields(meta: dict, arch: str, n_layer: int, head: int, get) -> dict[str, Any]:
    """ModelConfig fields beyond the llama ones; `get(key, kind, default)` reads `<arch>.` metadata."""
    if arch == "qwen3":
        return dict(qk_norm=True)
    window = get("attention.sliding_window", int, 0)
    if arch == "phi3":
        return dict(sliding_window=window, local_layers=tuple(range(n_layer))) if window else {}
    local = tuple(i for i in range(n_layer) if (i + 1) % GEMMA3_GLOBAL_EVERY) if window else ()
    return dict(
        activation="geglu",
        qk_norm=True,
        post_norms=True,
        scale_embeddings=True,
        attn_scalar=float(head),
        **(dict(sliding_window=window, local_layers=local, rope_local_base=GEMMA3_LOCAL_BASE) if local else {}),
    )


def plan(cfg: ModelConfig, arch: str, i: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Layer i's extra tensors: tfm name -> (GGUF name, shape)."""
    g, o, d, hd = f"blk.{i}.", f"blocks.{i}.", cfg.d_model, cfg.d_head
    out = {}
    if cfg.qk_norm:
        out |= {
            o + "attn.q_norm.weight": (g + "attn_q_norm.weight", (hd,)),
            o + "attn.k_norm.weight": (g + "attn_k_norm.weight", (hd,)),
        }
    if arch == "gemma3":
        out |= {
            o + "ln1_post.weight": (g + "post_attention_norm.weight", (d,)),
            o + "ln2_post.weight": (g + "post_ffw_norm.weight", (d,)),
        }
    return out


def fused(t, cfg: ModelConfig, i: int, check: bool) -> dict[str, torch.Tensor]:
    """phi3's fused qkv and [gate | up] of layer i (`t`: gguf.Tensors), split into tfm's names."""
    g, o, f, kv = f"blk.{i}.", f"blocks.{i}.", cfg.d_ff, cfg.n_kv_head * cfg.d_head
    qkv, up = (g + "attn_qkv.weight", (cfg.d_attn + 2 * kv, cfg.d_model)), (g + "ffn_up.weight", (2 * f, cfg.d_model))
    if check:
        t.check(*qkv[:1], *qkv[1])
        t.check(*up[:1], *up[1])
        return {}
    gate, fc = t.take(up[0], *up[1]).split(f)
    return {o + "attn.qkv.weight": t.take(qkv[0], *qkv[1]), o + "mlp.gate.weight": gate, o + "mlp.fc.weight": fc}
