"""GPT-NeoX (Pythia): Hugging Face GPTNeoXForCausalLM -> GPT.

LayerNorm with biases, exact GELU, partial rotary (rotary_pct), a parallel block by default,
untied head. Its fused query_key_value is interleaved per head, rows [h0: q k v][h1: q k v]...;
tfm's fused qkv is [all q | all k | all v], so rows are regrouped.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from ..weights import HF_ACTIVATIONS
from .common import Weights, hf_shape, load_family, rope_fields


def fields(data: dict, source: str) -> tuple[dict, dict]:
    shape = hf_shape(data, source)
    act = data.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"{source}: hidden_act {act!r} is not supported; expected one of {sorted(HF_ACTIVATIONS)}")
    if not data.get("attention_bias", True):
        raise ValueError(f"{source}: attention_bias=false is not supported for GPT-NeoX (tfm's NeoX has every bias)")
    kwargs = dict(
        **shape,
        activation=HF_ACTIVATIONS[act],
        norm_eps=data.get("layer_norm_eps", 1e-5),
        parallel_block=data.get("use_parallel_residual", True),
        tied_embeddings=data.get("tie_word_embeddings", False),
        **rope_fields(data, source, default_theta=10000.0, default_pct=0.25),
    )
    return kwargs, {"source_format": "huggingface-gpt-neox"}


def regroup_qkv(t: torch.Tensor, n_head: int) -> torch.Tensor:
    """Per-head interleaved [h: q k v] rows -> [all q | all k | all v] rows."""
    per_head = t.reshape(n_head, 3, -1, *t.shape[1:])  # (H, 3, hd[, D])
    return per_head.transpose(0, 1).reshape(t.shape)  # (3D[, D])


def convert(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    out = {
        "tok_emb.weight": w.take("gpt_neox.embed_in.weight", v, d),
        "ln_final.weight": w.take("gpt_neox.final_layer_norm.weight", d),
        "ln_final.bias": w.take("gpt_neox.final_layer_norm.bias", d),
    }
    if not cfg.tied_embeddings:  # published checkpoints say embed_out, transformers 5 writes lm_head
        out["unembed.weight"] = w.take("embed_out.weight" if w.has("embed_out.weight") else "lm_head.weight", v, d)
    for i in range(cfg.n_layer):
        hf, ours = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        out[ours + "attn.qkv.weight"] = regroup_qkv(
            w.take(hf + "attention.query_key_value.weight", 3 * d, d), cfg.n_head
        )
        out[ours + "attn.qkv.bias"] = regroup_qkv(w.take(hf + "attention.query_key_value.bias", 3 * d), cfg.n_head)
        for hf_name, name, shape in (
            ("attention.dense", "attn.proj", (d, d)),
            ("mlp.dense_h_to_4h", "mlp.fc", (f, d)),
            ("mlp.dense_4h_to_h", "mlp.proj", (d, f)),
            ("input_layernorm", "ln1", (d,)),
            ("post_attention_layernorm", "ln2", (d,)),
        ):
            out[ours + name + ".weight"] = w.take(hf + hf_name + ".weight", *shape)
            out[ours + name + ".bias"] = w.take(hf + hf_name + ".bias", shape[0])
    return out


def ignore(cfg: ModelConfig, key: str) -> bool:
    """Old checkpoints' buffers (causal mask, RoPE frequencies) and a tied head's copy."""
    return key.endswith(("attention.bias", "attention.masked_bias", "rotary_emb.inv_freq")) or (
        cfg.tied_embeddings and key in ("embed_out.weight", "lm_head.weight")
    )


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, convert, ignore)
