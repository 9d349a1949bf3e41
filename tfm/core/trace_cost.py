"""Bytes a trace holds, from a config's shapes alone (no forward): one block of a lazy trace
once read, or a whole eager trace. `tfm.loaders.limits` refuses prompts by these before paying; the
shapes are the ones documented in `tfm.trace` (re-exported there)."""

from __future__ import annotations

import torch


def _per_token_floats(config, length: int) -> dict[str, int]:
    """Numbers per (batch row, position) of a block's entries, by the shapes documented above."""
    d, f, h, qd = config.d_model, config.d_ff, config.n_head, config.d_attn
    kv = config.n_kv_head * config.d_head  # k, v width (grouped-query)
    stats = 2 if config.norm == "layernorm" else 1  # mean, std | rms
    mlp = (3 if config.activation in ("swiglu", "geglu") else 2) * f  # pre (, up), post
    rope = qd + kv if config.pos_encoding == "rope" else 0  # rotated q, k: new memory
    norms = 2 * (d + stats) if config.post_norms else 0  # Gemma's two norms after sublayers
    return {
        "computed": 6 * d + 2 * qd + 2 * kv + h * length + 2 * stats + mlp + rope + norms,  # see estimate_block_bytes
        "deferred": h * length + h * d + 2 * d + (2 * d if config.post_norms else 0),  # scores, result, normalized
        "aliases": 3 * d + (2 * d if config.post_norms else 0),
    }  # resid_pre and norm in/outputs


def estimate_block_bytes(
    config, length: int, batch: int = 1, dtype: torch.dtype = torch.float32, deferred: bool = False
) -> int:
    """Bytes one block's entries hold in a lazy trace once read: what reading one pattern costs
    (GPT-2 small at 1024 tokens: 107 MB). Counts what is new memory: qkv (3D), pattern (H·T),
    z, attn_out, the residual after attention and after the MLP, two norm outputs and the
    post-norm inputs or pre-norm residuals (8D), the norm statistics and the MLP hidden
    activations. `deferred` adds what is computed on its own first read: scores, per-head
    results and the normalised norm inputs (201 MB for GPT-2 small at 1024)."""
    n = _per_token_floats(config, length)
    floats = n["computed"] + (n["deferred"] if deferred else 0)
    return batch * length * floats * torch.empty(0, dtype=dtype).element_size()


def estimate_trace_bytes(config, length: int, batch: int = 1, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of a full eager trace with every entry read, each name counted (a name that is
    the same memory as another counts twice, as in the shape trace): GPT-2 small at 1024
    tokens: 2.75 GB."""
    n, d = _per_token_floats(config, length), config.d_model
    rotated = (
        config.d_attn + config.n_kv_head * config.d_head if config.pos_encoding == "rope" else 0
    )  # q, k: counted once
    block = n["computed"] + n["deferred"] + n["aliases"] - rotated
    final = (2 * d + (2 if config.norm == "layernorm" else 1) + d) if config.norm_placement == "pre" else 0
    per_token = config.n_layer * block + d + final + config.vocab_size  # embed, ln_final, logits
    positions = length * d if config.pos_encoding in ("learned", "sinusoidal") else 0
    angles = length * (config.rotary_dim // 2) if config.pos_encoding == "rope" else 0
    angles *= 2 if config.rope_local_base is not None else 1  # local layers' own angles
    return (batch * length * per_token + positions + angles) * torch.empty(0, dtype=dtype).element_size()
