"""Shapes, parameter counts and KV-cache sizes of a config (the shapes page), and the prompt
ids as a validated tensor (shared by the positions and norms analyses); parameters by component."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.kv_cache import KVCache
from ..core.config import ModelConfig
from ..core.model import GPT
from ..core.trace import ShapeEntry


def ids_tensor(ids, cfg: ModelConfig, min_len: int) -> torch.Tensor:
    """Token ids as a flat int64 tensor, validated against the config."""
    ids_t = torch.as_tensor(ids, dtype=torch.long).flatten().cpu()
    if ids_t.numel() < min_len:
        raise ValueError(f"this needs at least {min_len} tokens, got {ids_t.numel()}: type a longer prompt")
    if ids_t.numel() > cfg.context_length:
        raise ValueError(f"{ids_t.numel()} tokens exceed the context length {cfg.context_length}; cut the prompt")
    if int(ids_t.min()) < 0 or int(ids_t.max()) >= cfg.vocab_size:
        raise ValueError(f"token ids must be in [0, {cfg.vocab_size})")
    return ids_t


def tile_tokens(ids, batch: int, length: int) -> torch.Tensor:
    """(batch, length) ids: the prompt cut to `length` (repeated from its start if shorter),
    the same row `batch` times."""
    ids_t = torch.as_tensor(ids, dtype=torch.long).flatten()
    if ids_t.numel() == 0 or batch < 1 or length < 1:
        raise ValueError("need a non-empty prompt, batch >= 1 and length >= 1")
    row = ids_t.repeat(math.ceil(length / ids_t.numel()))[:length]
    return row[None].repeat(batch, 1)


def shape_trace(config: ModelConfig, ids, batch: int, length: int) -> tuple[ShapeEntry, ...]:
    """The shape trace of a traced forward of `tile_tokens(ids, batch, length)`.

    The model is built on PyTorch's "meta" device: the same code runs and every shape is
    computed, but no numbers are, so any size is instant. Shapes equal a real run's.
    """
    if length > config.context_length:
        raise ValueError(f"length {length} exceeds the context length {config.context_length}")
    tokens = tile_tokens(ids, batch, length)
    with torch.device("meta"):
        model = GPT(config)
    return model(tokens, trace=True).trace.shapes


def param_formulas(cfg: ModelConfig) -> dict[str, tuple[str, int]]:
    """Closed-form parameter count per component (keys as `tfm.analysis.param_counts`):
    name -> (formula text, value)."""
    d, f, v, L, b = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer, int(cfg.bias)
    attn_text, attn = _attention_formula(cfg)
    if cfg.activation in ("swiglu", "geglu"):
        mlp, mlp_text = 3 * d * f + (2 * f + d) * b, "3·d·d_ff" + (" + 2·d_ff + d" if b else "")
    else:
        mlp, mlp_text = 2 * d * f + (f + d) * b, "2·d·d_ff" + (" + d_ff + d" if b else "")
    learned, types = cfg.pos_encoding == "learned", cfg.type_vocab_size
    # ln1, ln2 (+ two post-norms) per block (+ final, + an encoder's embedding norm)
    n_norms = (4 if cfg.post_norms else 2) * L + (cfg.norm_placement == "pre") + cfg.embed_norm
    per_norm = 2 * d if (cfg.norm == "layernorm" and cfg.bias) else d
    head = d * d + d + per_norm + v if cfg.lm_head == "masked" else 0  # BERT's transform (dense, norm) and bias
    unembed = "0 (tied to the embedding)" if cfg.tied_embeddings else "V·d"
    return {
        "embeddings": (
            "V·d" + (" + T·d" if learned else "") + (f" + {types}·d (segments)" if types else ""),
            v * d + (cfg.context_length * d if learned else 0) + types * d,
        ),
        "attention": (f"L·({attn_text})", L * attn),
        "mlp": (f"L·({mlp_text})", L * mlp),
        "norms": (f"{n_norms} norms · {'2·d' if per_norm == 2 * d else 'd'}", n_norms * per_norm),
        "unembedding": (
            (f"d·d + d + {'2·d' if per_norm == 2 * d else 'd'} + V (masked-LM transform, bias); " + unembed)
            if head
            else unembed,
            head + (0 if cfg.tied_embeddings else v * d),
        ),
    }


def _attention_formula(cfg: ModelConfig) -> tuple[str, int]:
    """One block's attention parameters: (formula text, value)."""
    d, b = cfg.d_model, int(cfg.bias)
    kv, qkv_b, qd = cfg.n_kv_head * cfg.d_head, int(cfg.bias or cfg.qkv_bias), cfg.d_attn
    attn = d * (qd + 2 * kv) + qd * d + (qd + 2 * kv) * qkv_b + d * b  # qkv (d x (q + 2kv)) + proj (q x d)
    attn += 2 * cfg.d_head if cfg.qk_norm else 0  # QK-norm gains, one per head dim
    if qd != d:  # heads of their own size (Gemma 3, Qwen3): q = n_head·d_head
        return (
            f"2·d·q + 2·d·kv{' + q + 2·kv' if qkv_b else ''}{' + d' if b else ''}"
            f"{' + 2·d_head' if cfg.qk_norm else ''}, q = {cfg.n_head}·{cfg.d_head}, kv = {cfg.n_kv_head}·{cfg.d_head}",
            attn,
        )
    if kv == d:
        return f"4·d²{' + 4·d' if b else (' + 3·d' if qkv_b else '')}", attn
    # grouped-query: k and v are kv = n_kv_head·d_head wide
    return (
        f"2·d² + 2·d·kv{' + d + 2·kv' if qkv_b else ''}{' + d' if b else ''}, "
        f"kv = {cfg.n_kv_head}·{cfg.d_head}" + (" + 2·d_head" if cfg.qk_norm else ""),
        attn,
    )


@dataclass(frozen=True)
class KVCacheSize:
    """A KV cache's size in bytes: by the formula, and as `KVCache.nbytes()` of one allocated
    (on the meta device); `shape` is its K (and V) tensor's shape."""

    formula: int
    nbytes: int
    bytes_per_value: int
    shape: tuple[int, ...]


def kv_cache_bytes(cfg: ModelConfig, context: int, dtype: torch.dtype, batch: int = 1) -> KVCacheSize:
    """KV-cache size by formula, 2 (K and V) · layers · KV heads · d_head · context · batch ·
    bytes, and as `KVCache(...).nbytes()` (allocated on the meta device: no memory used)."""
    if not 1 <= context <= cfg.context_length:
        raise ValueError(f"context {context} must be between 1 and the context length {cfg.context_length}")
    per = torch.empty((), dtype=dtype).element_size()
    formula = 2 * cfg.n_layer * cfg.n_kv_head * cfg.d_head * context * batch * per
    cache = KVCache(cfg, batch=batch, max_len=context, device="meta", dtype=dtype)
    return KVCacheSize(formula, cache.nbytes(), per, tuple(cache.k.shape))


def kv_window_bytes(cfg: ModelConfig, context: int, dtype: torch.dtype, batch: int = 1) -> int:
    """KV-cache bytes when local layers keep only their window (as transformers' and llama.cpp's
    caches for Gemma do): 2 · KV heads · d_head · (global layers · context + local layers ·
    min(window, context)) · batch · bytes. tfm's KVCache keeps every position of every layer and
    masks instead (`kv_cache_bytes`)."""
    per = torch.empty((), dtype=dtype).element_size()
    n_local = len(cfg.local_layers)
    kept = (cfg.n_layer - n_local) * context + n_local * min(cfg.sliding_window or context, context)
    return 2 * cfg.n_kv_head * cfg.d_head * kept * batch * per


def param_counts(model: GPT) -> dict[str, int]:
    """Parameters by component; the values add up to `model.num_params()` (tied weights once)."""
    counts = {"embeddings": 0, "attention": 0, "mlp": 0, "norms": 0, "unembedding": 0}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if name.startswith(("tok_emb", "pos_emb", "type_emb")):  # an encoder's segments too
            counts["embeddings"] += p.numel()
        elif ".attn." in name:
            counts["attention"] += p.numel()
        elif ".mlp." in name:
            counts["mlp"] += p.numel()
        elif name.startswith(("unembed", "mlm.")):  # a masked-LM head's transform is part of its unembedding
            counts["unembedding"] += p.numel()
        else:
            counts["norms"] += p.numel()
    return counts


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # by the name a page shows


@dataclass(frozen=True)
class ParamRow:
    """One component's parameters: by `param_formulas` and counted from the model's tensors."""

    component: str
    formula: str
    by_formula: int
    counted: int

    @property
    def match(self) -> bool:
        return self.by_formula == self.counted


def param_rows(model: GPT) -> tuple[ParamRow, ...]:
    """Every component of `param_counts`, then the total, beside what `param_formulas` says."""
    counts, formulas = param_counts(model), param_formulas(model.config)
    rows = [ParamRow(k, formulas[k][0], formulas[k][1], v) for k, v in counts.items()]
    return (*rows, ParamRow("total", "sum of the above", sum(f[1] for f in formulas.values()), model.num_params()))


@dataclass(frozen=True)
class KVWhatIf:
    """The KV cache of this model's shape at another depth, KV-head count, context, precision and batch."""

    size: KVCacheSize
    window_bytes: int | None  # with sliding windows kept as windows (the model's own depth only), else None


def kv_what_if(cfg: ModelConfig, context: int, layers: int, kv_heads: int, dtype: str, batch: int) -> KVWhatIf:
    """`kv_cache_bytes` of `cfg` changed to `layers` and `kv_heads` (as many query heads per KV head as
    `cfg`); other depths drop the local windows. ValueError for a combination that is no model."""
    group = cfg.group_size  # query heads per KV head, as in this model
    what_if = cfg.replace(
        n_layer=layers,
        n_head=kv_heads * group,
        n_kv_head=kv_heads,
        d_model=kv_heads * group * cfg.d_head,
        context_length=max(cfg.context_length, context),
        **({} if layers == cfg.n_layer else dict(local_layers=(), sliding_window=None, rope_local_base=None)),
    )  # other depths: no windows
    size = kv_cache_bytes(what_if, context, DTYPES[dtype], batch)
    windows = bool(cfg.local_layers) and layers == cfg.n_layer
    return KVWhatIf(size, kv_window_bytes(what_if, context, DTYPES[dtype], batch) if windows else None)
