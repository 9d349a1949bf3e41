"""Llama (and checkpoints built on it: SmolLM, TinyLlama): Hugging Face LlamaForCausalLM -> GPT.

RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases. Mistral and Qwen2 store the same
tensor names, so their converters reuse `fields` and `convert`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from .common import Weights, hf_shape, load_family, rope_fields


def fields(data: dict, source: str, family: str = "llama") -> tuple[dict, dict]:
    """ModelConfig fields and meta from a Llama-style config.json."""
    shape = hf_shape(data, source)
    if data.get("hidden_act", "silu") != "silu":
        raise ValueError(
            f"{source}: hidden_act {data['hidden_act']!r} is not supported; this family uses 'silu' (SwiGLU)"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if data.get(flag, False):
            raise ValueError(f"{source}: {flag}=true is not supported for {family} (tfm's Llama has no biases)")
    d, h = data["hidden_size"], data["num_attention_heads"]
    if data.get("head_dim") not in (None, d // h if isinstance(h, int) and h else None):
        raise ValueError(
            f"{source}: head_dim={data['head_dim']} differs from hidden_size/num_attention_heads; "
            "tfm needs head_dim = hidden_size / num_attention_heads"
        )
    kwargs = dict(
        **shape,
        n_kv_head=data.get("num_key_value_heads") or h,
        norm="rmsnorm",
        norm_eps=data.get("rms_norm_eps", 1e-6),
        activation="swiglu",
        bias=False,
        tied_embeddings=data.get("tie_word_embeddings", False),
        **rope_fields(data, source, default_theta=10000.0),
    )
    return kwargs, {"source_format": f"huggingface-{family}"}


def outer_weights(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The embedding, the final norm and an untied unembedding, as every Llama-style family names them."""
    out = {
        "tok_emb.weight": w.take("model.embed_tokens.weight", cfg.vocab_size, cfg.d_model),
        "ln_final.weight": w.take("model.norm.weight", cfg.d_model),
    }
    if not cfg.tied_embeddings:
        out["unembed.weight"] = w.take("lm_head.weight", cfg.vocab_size, cfg.d_model)
    return out


def convert(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> tfm names: q, k, v projections stacked into the fused qkv (rows [q | k | v])."""
    d, f, kv, qd = cfg.d_model, cfg.d_ff, cfg.n_kv_head * cfg.d_head, cfg.d_attn
    out = outer_weights(w, cfg)
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        a = hf + "self_attn."
        out[ours + "attn.qkv.weight"] = torch.cat(
            [w.take(a + "q_proj.weight", qd, d), w.take(a + "k_proj.weight", kv, d), w.take(a + "v_proj.weight", kv, d)]
        )  # (D + 2 kv, D)
        if cfg.qkv_bias:
            out[ours + "attn.qkv.bias"] = torch.cat(
                [w.take(a + "q_proj.bias", qd), w.take(a + "k_proj.bias", kv), w.take(a + "v_proj.bias", kv)]
            )
        out[ours + "attn.proj.weight"] = w.take(a + "o_proj.weight", d, qd)
        out[ours + "mlp.gate.weight"] = w.take(hf + "mlp.gate_proj.weight", f, d)
        out[ours + "mlp.fc.weight"] = w.take(hf + "mlp.up_proj.weight", f, d)
        out[ours + "mlp.proj.weight"] = w.take(hf + "mlp.down_proj.weight", d, f)
        out[ours + "ln1.weight"] = w.take(hf + "input_layernorm.weight", d)
        out[ours + "ln2.weight"] = w.take(hf + "post_attention_layernorm.weight", d)
    return out


def ignore(cfg: ModelConfig, key: str) -> bool:
    """Keys that carry no weights of ours: a tied head's copy, old checkpoints' RoPE buffers."""
    return (cfg.tied_embeddings and key == "lm_head.weight") or key.endswith("rotary_emb.inv_freq")


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, convert, ignore)
