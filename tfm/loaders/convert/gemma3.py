"""Gemma 3 (text): Hugging Face Gemma3ForCausalLM -> GPT.

What Gemma adds to Llama's block, each a `ModelConfig` field: local layers reading a sliding
window of keys with their own RoPE base (`local_layers`, `sliding_window`, `rope_local_base`),
QK-norm, a norm after each sublayer too (`post_norms`: input, post-attention, pre-feedforward
and post-feedforward norms), GeGLU (tanh GELU), embeddings times sqrt(hidden_size) and scores
scaled by query_pre_attn_scalar ** -0.5. Gemma's RMSNorm multiplies by (1 + w): tfm stores the
gain 1 + w (computed in float32, as transformers does), so every norm is tfm's plain RMSNorm.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.config import ModelConfig
from ...core.validate import check_int, check_number
from . import llama
from .common import HF_SHAPE, Weights, hf_shape, load_family, need, rope_fields

REQUIRED = tuple(HF_SHAPE) + ("head_dim", "query_pre_attn_scalar", "sliding_window")


def local_layers(data: dict, n_layer: int, source: str) -> tuple[int, ...]:
    """The sliding layers: from `layer_types`, or every layer but each `sliding_window_pattern`-th (older files)."""
    types = data.get("layer_types")
    if types is None:
        every = check_int(f"{source}: sliding_window_pattern", data.get("sliding_window_pattern", 6), 1, 1_000)
        return tuple(i for i in range(n_layer) if (i + 1) % every)
    if not isinstance(types, list) or len(types) != n_layer or set(types) - {"sliding_attention", "full_attention"}:
        raise ValueError(
            f"{source}: layer_types must list 'sliding_attention' or 'full_attention' for each of the {n_layer} layers"
        )
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def _rope(data: dict, source: str) -> dict:
    """RoPE of global layers (rope_fields' reading) and local layers' base, from either layout:
    transformers 5's rope_parameters per layer type, or rope_theta + rope_local_base_freq."""
    params = data.get("rope_parameters")
    if isinstance(params, dict) and "full_attention" in params:
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
        if local.get("rope_type", "default") != "default":
            raise ValueError(f"{source}: local layers' RoPE type {str(local.get('rope_type'))[:20]!r} is not supported")
        glob = rope_fields(
            {"rope_parameters": full, "max_position_embeddings": data["max_position_embeddings"]},
            source,
            default_theta=1_000_000.0,
        )
        return dict(
            glob, rope_local_base=check_number(f"{source}: sliding rope_theta", local.get("rope_theta", 10000.0))
        )
    base = data.get("rope_local_base_freq", 10000.0)
    return dict(
        rope_fields(data, source, default_theta=1_000_000.0),
        rope_local_base=check_number(f"{source}: rope_local_base_freq", base),
    )


def fields(data: dict, source: str) -> tuple[dict, dict]:
    need(data, REQUIRED, source)
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if data.get(key) is not None:
            raise ValueError(f"{source}: {key}={data[key]} is not supported (Gemma 2 has it; Gemma 3 sets it to null)")
    if data.get("hidden_activation", "gelu_pytorch_tanh") not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(
            f"{source}: hidden_activation {str(data['hidden_activation'])[:30]!r} is not supported; "
            "Gemma 3 uses 'gelu_pytorch_tanh'"
        )
    if data.get("attention_bias", False) or data.get("use_bidirectional_attention", False):
        raise ValueError(
            f"{source}: attention_bias and use_bidirectional_attention must be false for Gemma3ForCausalLM"
        )
    n = data["num_hidden_layers"]
    kwargs = dict(
        **hf_shape(data, source),
        n_kv_head=data.get("num_key_value_heads") or data["num_attention_heads"],
        head_dim=data["head_dim"],
        norm="rmsnorm",
        norm_eps=data.get("rms_norm_eps", 1e-6),
        activation="geglu",
        bias=False,
        tied_embeddings=data.get("tie_word_embeddings", True),
        qk_norm=True,
        post_norms=True,
        scale_embeddings=True,
        attn_scalar=float(data["query_pre_attn_scalar"]),
        sliding_window=data["sliding_window"],
        local_layers=local_layers(data, n, source),
        **_rope(data, source),
    )
    if not kwargs["local_layers"]:
        kwargs.update(sliding_window=None, rope_local_base=None)
    return kwargs, {"source_format": "huggingface-gemma3"}


def gain(w: torch.Tensor) -> torch.Tensor:
    """Gemma's stored norm weight w -> the gain it multiplies by, 1 + w in float32 (transformers' order)."""
    return 1.0 + w.float()


def convert(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    d, f, kv, qd = cfg.d_model, cfg.d_ff, cfg.n_kv_head * cfg.d_head, cfg.d_attn
    out = {
        "tok_emb.weight": w.take("model.embed_tokens.weight", cfg.vocab_size, d),
        "ln_final.weight": gain(w.take("model.norm.weight", d)),
    }
    if not cfg.tied_embeddings:
        out["unembed.weight"] = w.take("lm_head.weight", cfg.vocab_size, d)
    norms = {
        "ln1": "input_layernorm",
        "ln1_post": "post_attention_layernorm",
        "ln2": "pre_feedforward_layernorm",
        "ln2_post": "post_feedforward_layernorm",
    }
    for i in range(cfg.n_layer):
        hf, ours, a = f"model.layers.{i}.", f"blocks.{i}.", f"model.layers.{i}.self_attn."
        out[ours + "attn.qkv.weight"] = torch.cat(
            [w.take(a + "q_proj.weight", qd, d), w.take(a + "k_proj.weight", kv, d), w.take(a + "v_proj.weight", kv, d)]
        )
        out[ours + "attn.proj.weight"] = w.take(a + "o_proj.weight", d, qd)
        out[ours + "attn.q_norm.weight"] = gain(w.take(a + "q_norm.weight", cfg.d_head))
        out[ours + "attn.k_norm.weight"] = gain(w.take(a + "k_norm.weight", cfg.d_head))
        out[ours + "mlp.gate.weight"] = w.take(hf + "mlp.gate_proj.weight", f, d)
        out[ours + "mlp.fc.weight"] = w.take(hf + "mlp.up_proj.weight", f, d)
        out[ours + "mlp.proj.weight"] = w.take(hf + "mlp.down_proj.weight", d, f)
        for tfm_name, hf_name in norms.items():
            out[ours + tfm_name + ".weight"] = gain(w.take(hf + hf_name + ".weight", d))
    return out


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, convert, llama.ignore)
