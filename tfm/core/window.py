"""Sliding-window (local) attention and the other per-layer settings of Gemma-style models:
which layers are local, their masks, and the validation of the config fields that describe them.

A local layer's query at position q reads only the keys k with q - window < k <= q (the
`window` most recent positions, itself included), as transformers' `sliding_window_overlay`
(`kv_idx > q_idx - sliding_window`); a global layer reads every earlier key. Nothing here holds
parameters; `tfm.core.model.Attention` asks `attention_mask` for its mask.
"""

from __future__ import annotations

import torch

from .validate import check_int, check_number


def check_fields(cfg) -> None:
    """The head size, QK-norm, sandwich norms, embedding scale, attention scale and sliding-window
    fields of a `ModelConfig` (each raises ValueError saying what is allowed)."""
    if cfg.head_dim is not None:
        check_int("head_dim", cfg.head_dim, 2, 65_536)
    elif cfg.d_model % cfg.n_head:
        raise ValueError(
            f"d_model={cfg.d_model} is not divisible by n_head={cfg.n_head}; "
            "pick n_head among the divisors of d_model (or give head_dim)"
        )
    for flag in ("qk_norm", "post_norms", "scale_embeddings"):
        if not isinstance(getattr(cfg, flag), bool):
            raise ValueError(f"{flag} must be true or false, got {getattr(cfg, flag)!r}")
    if cfg.post_norms and (cfg.norm_placement != "pre" or cfg.parallel_block):
        raise ValueError(
            "post_norms=true (a norm after each sublayer too, Gemma) needs norm_placement='pre' "
            "and parallel_block=false"
        )
    if cfg.attn_scalar is not None:
        check_number("attn_scalar", cfg.attn_scalar, 1e-6, 1e9, " (the scores are divided by its square root)")
    if cfg.rope_local_base is not None:
        check_number("rope_local_base", cfg.rope_local_base, 1.0 + 1e-9, None, " (10000 is usual)")
    _check_local_layers(cfg)


def _check_local_layers(cfg) -> None:
    layers = cfg.local_layers
    if not isinstance(layers, (list, tuple)) or len(layers) > cfg.n_layer:
        raise ValueError(f"local_layers must be a list of distinct layer indices below n_layer={cfg.n_layer}")
    object.__setattr__(cfg, "local_layers", tuple(layers))  # JSON gives a list; the config stays hashable
    for i in layers:
        check_int("local_layers entry", i, 0, cfg.n_layer - 1, f" (the model has {cfg.n_layer} layers)")
    if list(layers) != sorted(set(layers)):
        raise ValueError(f"local_layers={list(layers)[:12]} must be increasing, each layer once")
    if cfg.sliding_window is not None:
        check_int("sliding_window", cfg.sliding_window, 1, 10_000_000, " (keys each local query reads)")
    if bool(layers) != (cfg.sliding_window is not None):
        raise ValueError(
            "local_layers and sliding_window go together: give both (which layers slide, and how "
            "far they see) or neither"
        )
    if cfg.rope_local_base is not None and not layers:
        raise ValueError("rope_local_base is the RoPE base of local layers: the model has none (local_layers is empty)")


def layer_window(cfg, layer: int) -> int | None:
    """The window of layer `layer` (None: a global layer reading every earlier key)."""
    return cfg.sliding_window if layer in cfg.local_layers else None


def layer_kind(cfg, layer: int) -> str:
    """ "local" or "global", in words for pages and the Tour."""
    return "local" if layer_window(cfg, layer) is not None else "global"


def layer_note(cfg, layer: int) -> str:
    """What kind of layer `layer` is, in words for the Attention page and the Tour ("" when every
    layer is global)."""
    if not cfg.local_layers:
        return ""
    glob = [i for i in range(cfg.n_layer) if i not in cfg.local_layers]
    others = f"global layers {', '.join(map(str, glob))} read every earlier key" if glob else "no layer is global"
    if layer_window(cfg, layer) is not None:
        return (
            f"Layer {layer} is a **local** layer: each query reads only the last {cfg.sliding_window} keys "
            f"(itself included), a sliding window; keys further back are masked like future ones (grey), "
            f"however relevant. {len(cfg.local_layers)} of the {cfg.n_layer} layers are local; {others}."
        )
    return (
        f"Layer {layer} is a **global** layer: every query reads all earlier keys. The other "
        f"{len(cfg.local_layers)} layers are local, each reading only the last {cfg.sliding_window} keys."
    )


def window_keys(t_q: int, s: int, window: int, device, starts: torch.Tensor | None = None) -> torch.Tensor:
    """Bool mask, True where the window allows: (T, S) for queries at the last T of S positions,
    or (B, 1, T, S) with `starts` (B,), row b's first query at position starts[b]."""
    keys = torch.arange(s, device=device)
    if starts is None:
        q_pos = torch.arange(s - t_q, s, device=device)[:, None]  # (T, 1)
        return keys[None, :] > q_pos - window  # (T, S)
    q_pos = starts[:, None] + torch.arange(t_q, device=device)  # (B, T)
    return (keys[None, None, :] > q_pos[..., None] - window)[:, None]  # (B, 1, T, S)


def _causal(t_q: int, s: int, device) -> torch.Tensor:
    """(T, S) bool, True where key <= query, queries at the last T of S positions (functional.causal_mask)."""
    return torch.arange(s, device=device)[None, :] <= torch.arange(s - t_q, s, device=device)[:, None]


def attention_mask(mask, t_q: int, s: int, window: int | None, device, starts=None):
    """A layer's mask: `mask` (the causal "causal", None for one new query, or a bool tensor)
    narrowed to the layer's window when it has one and the keys reach past it."""
    if window is None or s <= window:
        return mask
    narrow = window_keys(t_q, s, window, device, starts)
    if isinstance(mask, str) or mask is None:
        return narrow & _causal(t_q, s, device) if mask is not None or t_q > 1 else narrow
    return mask & narrow


def layer_mask(
    cache, t_q: int, s: int, window: int | None, device, causal: bool = True, decoder: bool = True, key_mask=None
):
    """The mask `tfm.core.model.Attention` passes to `attend`: a decoder's causal one (a ragged
    KV cache's rows mask their own keys), narrowed to a local layer's window; an encoder's
    (`decoder` false) only its padding `key_mask`; none at all when `causal` is false (the bare
    self-attention, tfm.analysis.positions' permutation check)."""
    if not (causal and decoder):
        return key_mask if causal else None
    mask = cache.attn_mask(t_q) if cache is not None else None
    if mask is None:
        mask = "causal" if t_q == s else (None if t_q == 1 else _causal(t_q, s, device))
    starts = cache.starts if isinstance(mask, torch.Tensor) and mask.dim() == 4 else None
    return attention_mask(mask, t_q, s, window, device, starts)
