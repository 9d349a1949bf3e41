"""The names of a trace's entries and their axes: the one table (`NAMES`) that typed accessors and
pages build names from (`name(concept, ...)`), and the axis names of every entry (`AXES`,
`axes_for`), which a `tfm.core.trace.Recorder` checks each recorded shape against.

Names and axes (B batch, T query positions, S key positions, H query heads, Hkv key/value heads
(= H unless grouped-query), hd head dim, rd rotated dims (= hd unless partial rotary), D d_model,
F d_ff, V vocab; `{i}` is the block index, `{n}` is `ln1`, `ln2` or, at the end, `ln_final`):

    embed                    (B, T, D)    token embeddings
    pos_embed                (T, D)       learned or sinusoidal positional vectors added to embed
    type_embed               (B, T, D)    an encoder's token-type (segment) vectors added to embed
    ln_embed.*               as below     an encoder's LayerNorm over the summed embeddings
    rope.angles              (T, rd/2)    RoPE rotation angle per position and dimension pair
    rope.local_angles        (T, rd/2)    the same for local layers, when their RoPE base differs
    blocks.{i}.resid_pre     (B, T, D)    residual stream entering block i
    blocks.{i}.{n}.input     (B, T, D)    what the norm receives
    blocks.{i}.{n}.mean      (B, T)       per-token mean of the input (LayerNorm only)
    blocks.{i}.{n}.std       (B, T)       per-token std sqrt(var + eps) (LayerNorm only)
    blocks.{i}.{n}.rms       (B, T)       per-token sqrt(mean(x^2) + eps) (RMSNorm only)
    blocks.{i}.{n}.normalized(B, T, D)    input standardised, before gain and bias
    blocks.{i}.{n}.output    (B, T, D)    after gain (and bias)
    blocks.{i}.attn.q        (B, H, T, hd) per-head queries (RoPE applied)
    blocks.{i}.attn.k|v      (B, Hkv, S, hd) keys (RoPE applied) and values, per key/value head
    blocks.{i}.attn.scores   (B, H, T, S) q.k / sqrt(hd), masked positions = -inf
    blocks.{i}.attn.pattern  (B, H, T, S) softmax of scores; rows sum to 1
    blocks.{i}.attn.z        (B, H, T, hd) pattern @ v, per head
    blocks.{i}.attn.result   (B, H, T, D) each head's output through its slice of W_O
    blocks.{i}.attn_out      (B, T, D)    attention sublayer output (sum of heads + bias; after ln1_post
                                          when the config has post_norms, as mlp_out after ln2_post)
    blocks.{i}.resid_mid     (B, T, D)    residual stream between attention and MLP (with a
                                          parallel block: resid_pre + attn_out, which the MLP does not read)
    blocks.{i}.mlp.pre       (B, T, F)    hidden pre-activation (the gate's, for SwiGLU)
    blocks.{i}.mlp.post      (B, T, F)    hidden after the activation (gate * up, for SwiGLU)
    blocks.{i}.mlp_out       (B, T, D)    MLP sublayer output
    blocks.{i}.resid_post    (B, T, D)    residual stream leaving block i
    ln_final.*               as above     the final norm
    logits                   (B, T, V)
"""

from __future__ import annotations

import functools

# Axis names by the last part(s) of a trace name; the longest matching suffix wins.
AXES: dict[str, tuple[str, ...]] = {
    "embed": ("batch", "pos", "d_model"),
    "pos_embed": ("pos", "d_model"),
    "type_embed": ("batch", "pos", "d_model"),
    "rope.angles": ("pos", "rotary_dim/2"),
    "rope.local_angles": ("pos", "rotary_dim/2"),
    "resid_pre": ("batch", "pos", "d_model"),
    "input": ("batch", "pos", "d_model"),
    "mean": ("batch", "pos"),
    "std": ("batch", "pos"),
    "rms": ("batch", "pos"),
    "normalized": ("batch", "pos", "d_model"),
    "output": ("batch", "pos", "d_model"),
    "attn.qkv": ("batch", "pos", "(head+2*kv_head)*d_head"),
    "attn.q": ("batch", "head", "pos", "d_head"),
    "attn.k": ("batch", "kv_head", "key_pos", "d_head"),
    "attn.v": ("batch", "kv_head", "key_pos", "d_head"),
    "attn.scores": ("batch", "head", "query_pos", "key_pos"),
    "attn.pattern": ("batch", "head", "query_pos", "key_pos"),
    "attn.z": ("batch", "head", "query_pos", "d_head"),
    "attn.z_merged": ("batch", "pos", "head*d_head"),
    "attn.result": ("batch", "head", "pos", "d_model"),
    "attn_out": ("batch", "pos", "d_model"),
    "resid_mid": ("batch", "pos", "d_model"),
    "mlp.pre": ("batch", "pos", "d_ff"),
    "mlp.up": ("batch", "pos", "d_ff"),
    "mlp.post": ("batch", "pos", "d_ff"),
    "mlp_out": ("batch", "pos", "d_model"),
    "resid_post": ("batch", "pos", "d_model"),
    "tokens": ("batch", "pos"),
    "logits": ("batch", "pos", "vocab"),
    "memory": ("batch", "src_pos", "d_model"),
}


def _encdec_axes(part: str, keys: str) -> dict[str, tuple[str, ...]]:
    """Encoder-decoder (tfm.teach.encdec) attention entries: decoder self-attention reads its own
    positions (`key_pos`), cross-attention the source's (`src_pos`)."""
    per_head = {
        "q": ("pos", "d_head"),
        "k": (keys, "d_head"),
        "v": (keys, "d_head"),
        "scores": ("query_pos", keys),
        "pattern": ("query_pos", keys),
        "z": ("query_pos", "d_head"),
    }
    axes = {f"{part}.{k}": ("batch", "head") + rest for k, rest in per_head.items()}
    return axes | {f"{part}.z_merged": ("batch", "pos", "d_model"), f"{part}_out": ("batch", "pos", "d_model")}


AXES |= (
    _encdec_axes("self", "key_pos") | _encdec_axes("cross", "src_pos") | {"resid_cross": ("batch", "pos", "d_model")}
)


# Concept -> trace name, the one table the typed accessors (and pages) build names from.
NAMES: dict[str, str] = {
    "embed": "embed",
    "pos_embed": "pos_embed",
    "rope_angles": "rope.angles",
    "logits": "logits",
    "resid_pre": "blocks.{layer}.resid_pre",
    "resid_mid": "blocks.{layer}.resid_mid",
    "resid_post": "blocks.{layer}.resid_post",
    "attn_out": "blocks.{layer}.attn_out",
    "mlp_out": "blocks.{layer}.mlp_out",
    "q": "blocks.{layer}.attn.q",
    "k": "blocks.{layer}.attn.k",
    "v": "blocks.{layer}.attn.v",
    "scores": "blocks.{layer}.attn.scores",
    "pattern": "blocks.{layer}.attn.pattern",
    "z": "blocks.{layer}.attn.z",
    "result": "blocks.{layer}.attn.result",
    "mlp_pre": "blocks.{layer}.mlp.pre",
    "mlp_up": "blocks.{layer}.mlp.up",
    "mlp_post": "blocks.{layer}.mlp.post",
    "norm_input": "{norm}.input",
    "norm_mean": "{norm}.mean",
    "norm_std": "{norm}.std",
    "norm_rms": "{norm}.rms",
    "norm_normalized": "{norm}.normalized",
    "norm_output": "{norm}.output",
}


def name(concept: str, layer: int | None = None, norm: str | None = None) -> str:
    """The trace name of a concept: `name("pattern", 3)` -> "blocks.3.attn.pattern",
    `name("norm_std", 2, "ln1")` -> "blocks.2.ln1.std", `name("norm_output", norm="ln_final")`."""
    if concept not in NAMES:
        raise ValueError(f"unknown trace concept {concept!r}; known: {sorted(NAMES)}")
    template = NAMES[concept]
    if "{norm}" in template:
        if norm not in ("ln1", "ln2", "ln_final", "ln1_post", "ln2_post"):
            raise ValueError(
                f"norm={norm!r}: choose ln1, ln2 or ln_final (or ln1_post, ln2_post: norms after each sublayer)"
            )
        template = template.replace("{norm}", "ln_final" if norm == "ln_final" else "blocks.{layer}." + norm)
    if "{layer}" in template:
        if not isinstance(layer, int):
            raise ValueError(f"{concept!r} belongs to a block: give its layer index")
        return template.format(layer=layer)
    return template


@functools.lru_cache(maxsize=16384)  # a traced forward asks for each of its ~25 names per block
def axes_for(name: str) -> tuple[str, ...]:
    """Axis names for a trace name, from the longest matching suffix in `AXES`."""
    parts = name.split(".")
    for start in range(len(parts)):
        suffix = ".".join(parts[start:])
        if suffix in AXES:
            return AXES[suffix]
    raise KeyError(f"no axis names documented for trace name {name!r}; add it to tfm.core.trace_names.AXES")


def head_label(layer: int, head: int) -> str:
    """An attention head as every page, chart, answer and card spells it: "L3 H2" (layer 3, head 2)."""
    return f"L{layer} H{head}"
