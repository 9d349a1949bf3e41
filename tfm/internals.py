"""Computations behind the positional-encoding and LayerNorm pages (no Streamlit here).

- `depth_norms`: activation and gradient norms across depth of a fresh random model.
- `permutation_check`: self-attention without positions cannot tell token order apart.
- `layernorm_worked_example`: one norm call redone step by step, checked against torch.
- position tables, their similarities and PCA, the sinusoidal dot-product identity.
- `shape_trace`, `param_formulas`, `kv_cache_bytes`: the shapes-and-parameters page.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .cache import KVCache
from .config import ModelConfig
from .model import GPT, apply_rope, attend, rope_angles, sinusoidal_table
from .trace import ShapeEntry, Trace


def _ids_tensor(ids, cfg: ModelConfig, min_len: int) -> torch.Tensor:
    """Token ids as a flat int64 tensor, validated against the config."""
    ids_t = torch.as_tensor(ids, dtype=torch.long).flatten().cpu()
    if ids_t.numel() < min_len:
        raise ValueError(f"this needs at least {min_len} tokens, got {ids_t.numel()}: type a longer prompt")
    if ids_t.numel() > cfg.context_length:
        raise ValueError(f"{ids_t.numel()} tokens exceed the context length {cfg.context_length}; cut the prompt")
    if int(ids_t.min()) < 0 or int(ids_t.max()) >= cfg.vocab_size:
        raise ValueError(f"token ids must be in [0, {cfg.vocab_size})")
    return ids_t


# ---- depth: pre-norm vs post-norm, LayerNorm vs RMSNorm --------------------------------

def depth_norms(config: ModelConfig, ids: list[int] | torch.Tensor, seed: int = 0) -> dict:
    """Activation and gradient norms across depth of a *fresh random* model of `config`.

    Returns {"resid_norm": (n_layer+1,) mean L2 norm per token of the residual stream entering
    block 0 and leaving each block, "grad_norm": (n_layer,) L2 norm of the gradient of the LM
    loss on `ids` with respect to each block's parameters, "loss": float}. Runs on the CPU, in
    eval mode (no dropout); the model is built here and thrown away, never a shared one.
    """
    ids_t = _ids_tensor(ids, config, min_len=2)
    model = GPT(config)
    model.reset_parameters(torch.Generator().manual_seed(seed))
    model.eval()
    with torch.enable_grad():
        out = model(ids_t[None], trace=True)
        loss = F.cross_entropy(out.logits[0, :-1], ids_t[1:])       # predict each next token
        loss.backward()
    tr = out.trace
    resid = torch.stack([s.norm(dim=-1).mean() for _, s in tr.residual_streams(0)])  # (L+1,)
    grads = torch.stack([
        torch.sqrt(sum((p.grad.double() ** 2).sum() for p in block.parameters() if p.grad is not None)).float()
        for block in model.blocks
    ])                                                                 # (L,)
    return {"resid_norm": resid.detach(), "grad_norm": grads, "loss": float(loss.detach())}


# ---- positions ---------------------------------------------------------------------------

def block0_attention(model: GPT, h: torch.Tensor, angles: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Block 0's attention sublayer (its own norm and weights) on a (B, T, D) input.

    With `causal=False` there is no mask at all: the bare self-attention operation.
    """
    block = model.blocks[0]
    a_in = block.ln1(h) if block.pre else h
    attn = block.attn
    q, k, v = (attn.split_heads(part) for part in attn.qkv(a_in).split(h.shape[-1], dim=-1))  # (B, H, T, hd)
    if angles is not None:
        q, k = apply_rope(q, angles), apply_rope(k, angles)
    z = attend(q, k, v, "causal" if causal else None, None)              # (B, H, T, hd)
    return attn.proj(z.transpose(1, 2).reshape(h.shape))                 # (B, T, D)


def _shuffle(t: int, g: torch.Generator) -> torch.Tensor:
    """A random permutation of t positions that is not the identity (when t > 1)."""
    perm = torch.randperm(t, generator=g)
    if t > 1 and torch.equal(perm, torch.arange(t)):
        perm = perm.roll(1)
    return perm


@torch.no_grad()
def permutation_check(model: GPT, ids, seed: int = 0) -> dict:
    """Does block 0's attention notice when the prompt's tokens are shuffled?

    Full (unmasked) attention: max |attn(shuffled x) - shuffle(attn(x))|, with and without the
    model's positional information (added vectors, or RoPE's rotation; positions stay at
    0..T-1 while the tokens move). Causal attention: the change of the *last* token's output
    when only the earlier tokens are shuffled. "scale" is max |attn(x)| for comparison.
    Values for "with positions" are None when the model has none.
    """
    cfg = model.config
    device = next(model.parameters()).device
    ids_t = _ids_tensor(ids, cfg, min_len=2).to(device)
    t = ids_t.numel()
    g = torch.Generator().manual_seed(seed)
    perm, perm_prefix = _shuffle(t, g), torch.cat([_shuffle(t - 1, g), torch.tensor([t - 1])])
    x = model.tok_emb(ids_t[None])                                       # (1, T, D)
    pos, angles = None, None
    if model.pos_emb is not None:
        pos = model.pos_emb.weight[:t]
    elif cfg.pos_encoding == "sinusoidal":
        pos = model.pos_table[:t]
    elif cfg.pos_encoding == "rope":
        angles = rope_angles(model.inv_freq, 0, t)

    def run(tokens_x, with_pos: bool, causal: bool):
        h = tokens_x + pos if (with_pos and pos is not None) else tokens_x
        return block0_attention(model, h, angles if with_pos else None, causal)

    def measure(with_pos: bool) -> tuple[float, float]:
        full = (run(x[:, perm], with_pos, False) - run(x, with_pos, False)[:, perm]).abs().max()
        last = (run(x[:, perm_prefix], with_pos, True)[:, -1] - run(x, with_pos, True)[:, -1]).abs().max()
        return float(full), float(last)

    has_pos = cfg.pos_encoding != "none"
    full_without, last_without = measure(False)
    full_with, last_with = measure(True) if has_pos else (None, None)
    return {
        "pos_encoding": cfg.pos_encoding, "perm": perm.tolist(), "perm_prefix": perm_prefix.tolist(),
        "full_without": full_without, "full_with": full_with,
        "causal_last_without": last_without, "causal_last_with": last_with,
        "scale": float(run(x, True, False).abs().max()),
    }


def position_vectors(model: GPT, length: int | None = None) -> torch.Tensor | None:
    """The model's own added positional vectors (first `length` positions), or None for
    RoPE / no positions. Learned: `pos_emb.weight`; sinusoidal: the `pos_table` buffer."""
    if model.pos_emb is not None:
        table = model.pos_emb.weight
    elif model.config.pos_encoding == "sinusoidal":
        table = model.pos_table
    else:
        return None
    return table[:length].detach().float().cpu()


def rope_angle_table(model: GPT, length: int) -> torch.Tensor:
    """(length, d_head/2) rotation angles in radians, computed as the model does."""
    if model.config.pos_encoding != "rope":
        raise ValueError("the model does not use RoPE")
    return rope_angles(model.inv_freq, 0, length).detach().float().cpu()


def cosine_similarity_matrix(table: torch.Tensor) -> torch.Tensor:
    """(T, D) -> (T, T) cosine similarity between every pair of rows."""
    unit = table / table.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def pca_2d(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Project rows on the top two principal components: ((T, 2) coords, (2,) variance share)."""
    centered = table.double() - table.double().mean(0)
    _, s, vh = torch.linalg.svd(centered, full_matrices=False)
    # SVD signs are arbitrary: make each component's largest loading positive, so it is stable.
    vh = vh * vh.gather(1, vh.abs().argmax(-1, keepdim=True)).sign()
    share = (s ** 2) / (s ** 2).sum().clamp_min(1e-300)
    coords = centered @ vh[:2].T
    return coords.float(), share[:2].float()


def sinusoidal_dots(length: int, d_model: int, starts: list[int]) -> dict:
    """PE(p) . PE(p + k) for k = 0.. for each start p, and sum_i cos(k w_i) (which predicts
    it for every p). Returns {"k": (K,), "dots": {p: (K,)}, "formula": (K,), "periods": (D/2,)}."""
    if d_model < 2 or d_model % 2 or length < 2:
        raise ValueError("need an even d_model >= 2 and a length >= 2")
    table = sinusoidal_table(length, d_model).double()                  # (T, D)
    span = length - max(starts)
    if span < 1:
        raise ValueError(f"start positions {starts} must be below the length {length}")
    k = torch.arange(span)
    dots = {p: table[p + k] @ table[p] for p in starts}
    omega = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    formula = torch.cos(k[:, None].double() * omega).sum(-1)
    return {"k": k, "dots": dots, "formula": formula, "periods": 2 * math.pi / omega}


def doubling_dims(d_model: int, n: int) -> tuple[list[int], list[float]]:
    """Sine dimensions (2i) whose periods 2π·10000^(2i/d) come closest to 2π·2^b, b = 0..n-1:
    a subset whose frequencies halve step by step, like the bits of a binary counter."""
    periods = 2 * math.pi * torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pairs: list[int] = []
    for b in range(n):
        i = int((periods.log() - math.log(2 * math.pi * 2 ** b)).abs().argmin())
        if i not in pairs:
            pairs.append(i)
    return [2 * i for i in pairs], [float(periods[i]) for i in pairs]


def binary_bits(length: int, n_bits: int) -> torch.Tensor:
    """(length, n_bits): bit b of each position p, least significant first."""
    return (torch.arange(length)[:, None] >> torch.arange(n_bits)) & 1


# ---- LayerNorm / RMSNorm worked example --------------------------------------------------

def _pick_norm(model: GPT, layer: int, which: str):
    """The norm module and its trace name for ln1 / ln2 of a block, or ln_final."""
    if which == "ln_final":
        if model.ln_final is None:
            raise ValueError("this post-norm model has no final norm; pick ln1 or ln2")
        return model.ln_final, "ln_final"
    if which not in ("ln1", "ln2"):
        raise ValueError(f"which={which!r}: choose ln1, ln2 or ln_final")
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer {layer} does not exist; the model has {len(model.blocks)} blocks")
    return getattr(model.blocks[layer], which), f"blocks.{layer}.{which}"


def layernorm_worked_example(model: GPT, trace: Trace, layer: int, token: int, which: str) -> dict:
    """Redo one norm call from the trace (batch 0) step by step in float64, and compare with
    `F.layer_norm` / `F.rms_norm` on the same input with the model's weight (and bias).

    `which` is "ln1", "ln2" (of block `layer`) or "ln_final". Returns the input `x`, `mean`
    (LayerNorm) , `var` or `mean_square`, `std`/`rms`, `normalized`, `weight`, `bias`,
    `output`, `reference` (torch's function), `max_abs_diff` and `trace_diff` (against the
    model's own float32 output in the trace).
    """
    norm, name = _pick_norm(model, layer, which)
    x_all = trace[f"{name}.input"][0]
    if not 0 <= token < x_all.shape[0]:
        raise ValueError(f"token {token} does not exist; the prompt has {x_all.shape[0]} tokens")
    x = x_all[token].double()
    w = norm.weight.detach().double().cpu()
    b = norm.bias.detach().double().cpu() if norm.bias is not None else None
    out: dict = {"kind": norm.kind, "eps": norm.eps, "x": x, "weight": w, "bias": b}
    if norm.kind == "layernorm":
        mean = x.mean()
        var = ((x - mean) ** 2).mean()                                  # biased, as LayerNorm uses
        std = torch.sqrt(var + norm.eps)
        normalized = (x - mean) / std
        reference = F.layer_norm(x, x.shape, w, b, norm.eps)
        out.update(mean=float(mean), var=float(var), std=float(std))
    else:
        mean_square = (x ** 2).mean()
        rms = torch.sqrt(mean_square + norm.eps)
        normalized = x / rms
        reference = F.rms_norm(x, x.shape, w, norm.eps)
        out.update(mean_square=float(mean_square), rms=float(rms))
    output = normalized * w + (b if b is not None else 0.0)
    out.update(normalized=normalized, output=output, reference=reference,
               max_abs_diff=float((output - reference).abs().max()),
               trace_diff=float((output - trace[f"{name}.output"][0, token].double()).abs().max()))
    return out


# ---- shapes, parameters, KV cache ---------------------------------------------------------

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
    attn = 4 * d * d + 4 * d * b                                          # qkv (3d^2) + proj (d^2)
    if cfg.activation == "swiglu":
        mlp, mlp_text = 3 * d * f + (2 * f + d) * b, "3·d·d_ff" + (" + 2·d_ff + d" if b else "")
    else:
        mlp, mlp_text = 2 * d * f + (f + d) * b, "2·d·d_ff" + (" + d_ff + d" if b else "")
    learned = cfg.pos_encoding == "learned"
    n_norms = 2 * L + (cfg.norm_placement == "pre")                       # ln1, ln2 per block (+ final)
    per_norm = 2 * d if (cfg.norm == "layernorm" and cfg.bias) else d
    return {
        "embeddings": ("V·d" + (" + T·d" if learned else ""), v * d + (cfg.context_length * d if learned else 0)),
        "attention": (f"L·(4·d²{' + 4·d' if b else ''})", L * attn),
        "mlp": (f"L·({mlp_text})", L * mlp),
        "norms": (f"{n_norms} norms · {'2·d' if per_norm == 2 * d else 'd'}", n_norms * per_norm),
        "unembedding": ("0 (tied to the embedding)" if cfg.tied_embeddings else "V·d", 0 if cfg.tied_embeddings else v * d),
    }


def kv_cache_bytes(cfg: ModelConfig, context: int, dtype: torch.dtype, batch: int = 1) -> dict:
    """KV-cache size by formula, 2 (K and V) · layers · heads · d_head · context · batch ·
    bytes, and as `KVCache(...).nbytes()` (allocated on the meta device: no memory used)."""
    if not 1 <= context <= cfg.context_length:
        raise ValueError(f"context {context} must be between 1 and the context length {cfg.context_length}")
    per = torch.empty((), dtype=dtype).element_size()
    formula = 2 * cfg.n_layer * cfg.n_head * cfg.d_head * context * batch * per
    cache = KVCache(cfg, batch=batch, max_len=context, device="meta", dtype=dtype)
    return {"formula": formula, "nbytes": cache.nbytes(), "bytes_per_value": per,
            "shape": tuple(cache.k.shape)}
