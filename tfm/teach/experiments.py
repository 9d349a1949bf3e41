"""Small live experiments behind the design choices of the 2017 Transformer (no Streamlit).

Each function builds its own tensors from a seeded generator (or a fresh random model),
runs in well under a few seconds on a CPU, and returns plain tensors / numbers:

- `softmax_scaling`: why scores are divided by sqrt(d_k).
- `residual_gradients`: gradients through a deep stack with and without residuals.
- `norm_placement_depth`: pre-norm vs post-norm across depth (uses `tfm.analysis.norms.depth_norms`).
- `norm_axes`, `norm_timing`: which axis LayerNorm and BatchNorm normalise; RMSNorm's cost.
- `mask_demo`: causal and padding masks through the engine's `attend`.
- `head_split_shapes`: the multi-head split/merge, read from a real run's shape trace.
"""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F

from ..core.config import ModelConfig
from ..analysis.norms import depth_norms
from ..core.model import GPT, attend, causal_mask
from ..core.stats import entropy
from ..core.trace import Recorder

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."


def softmax_scaling(d_ks=(4, 16, 64, 256, 1024), n_keys: int = 32, n_queries: int = 256, seed: int = 0) -> dict:
    """Softmax over q.k for random unit-variance q, k, with and without the 1/sqrt(d_k) factor.

    Per d_k (means over queries): "max_weight" (largest attention weight), "entropy" (nats;
    uniform = ln n_keys), "grad_norm" (L2 norm of d(sum(pattern * g))/d(scores) for a fixed
    random upstream gradient g: how much signal flows back into the scores), "score_std".
    Keys "scaled" and "unscaled" hold dicts of (len(d_ks),) tensors.
    """
    g = torch.Generator().manual_seed(seed)
    upstream = torch.randn(n_queries, n_keys, generator=g, dtype=torch.float64)
    out = {"d_k": list(d_ks), "n_keys": n_keys, "uniform_entropy": math.log(n_keys)}
    rows = {"scaled": [], "unscaled": []}
    for d_k in d_ks:
        q = torch.randn(n_queries, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(n_keys, d_k, generator=g, dtype=torch.float64)
        for name, factor in (("scaled", 1 / math.sqrt(d_k)), ("unscaled", 1.0)):
            scores = (q @ k.T * factor).requires_grad_(True)  # (Nq, Nk)
            with torch.enable_grad():
                pattern = scores.softmax(-1)
                (pattern * upstream).sum().backward()
            rows[name].append(
                [
                    pattern.max(-1).values.mean().detach(),
                    entropy(pattern).mean().detach(),
                    scores.grad.norm(dim=-1).mean(),
                    scores.detach().std(),
                ]
            )
    for name, vals in rows.items():
        t = torch.tensor([[v.item() for v in row] for row in vals])  # (len(d_ks), 4)
        out[name] = dict(zip(("max_weight", "entropy", "grad_norm", "score_std"), t.T))
    return out


def _without_residual(block, x: torch.Tensor) -> torch.Tensor:
    """The same block's sublayers chained with no residual additions: mlp(ln2(attn(ln1(x))))."""
    a = block.attn(block.ln1(x, None), None)
    return block.mlp(block.ln2(a, None), None)


def residual_gradients(n_layers: int = 50, d_model: int = 64, seed: int = 0, text: str = DEFAULT_TEXT) -> dict:
    """Gradient norm of each block's parameters in a fresh random `n_layers`-block GPT stack.

    Same weights (GPT-2 init), same input (the embedded `text` bytes) and same loss (a fixed
    random readout of the last block's output) for both: "residual" runs the engine's own
    pre-norm blocks, x = x + attn(ln1(x)); x = x + mlp(ln2(x)); "plain" chains the same
    sublayers without the additions. Returns per-block (n_layers,) tensors and block 0's.
    """
    ids = list(text.encode("utf-8"))
    cfg = ModelConfig(
        vocab_size=257, context_length=max(64, len(ids)), d_model=d_model, n_layer=n_layers, n_head=4, d_ff=4 * d_model
    )
    g = torch.Generator().manual_seed(seed)
    model = GPT(cfg, g)
    model.eval()
    x0 = model.embed(torch.tensor([ids]), 0, None)[0].detach()  # (1, T, D)
    readout = torch.randn(d_model, generator=g)
    out = {"n_layers": n_layers}
    for name in ("plain", "residual"):
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            x = x0
            for block in model.blocks:
                x = block(x, None) if name == "residual" else _without_residual(block, x)
            (x @ readout).mean().backward()
        out[name] = torch.stack(
            [
                torch.sqrt(sum(p.grad.double().pow(2).sum() for p in b.parameters() if p.grad is not None)).float()
                for b in model.blocks
            ]
        )  # (n_layers,)
        out[f"{name}_first"] = float(out[name][0])
    return out


def norm_placement_depth(n_layer: int = 12, seed: int = 0, text: str = DEFAULT_TEXT) -> dict:
    """`depth_norms` of a fresh random byte-level GPT (d_model 64), pre-norm and post-norm.

    Returns {"pre": ..., "post": ..., "config": ModelConfig of the pre-norm model}."""
    ids = list(text.encode("utf-8"))
    cfg = ModelConfig(vocab_size=257, context_length=max(64, len(ids)), d_model=64, n_layer=n_layer, n_head=4, d_ff=256)
    return {
        "pre": depth_norms(cfg, ids, seed),
        "post": depth_norms(cfg.replace(norm_placement="post"), ids, seed),
        "config": cfg,
    }


def norm_axes(batch: int = 2, seq: int = 3, d: int = 4, seed: int = 0) -> dict:
    """One (batch, seq, d) tensor through LayerNorm and BatchNorm (batch statistics).

    LayerNorm normalises each token over its d features; BatchNorm normalises each feature
    over all batch x seq tokens. Tensors come back flattened to (batch*seq, d) rows, with the
    means / stds (population, as both norms use) over rows ("col_*") and columns ("row_*").
    """
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([1.0, 5.0, 0.5, 2.0]).repeat(d)[:d]  # features on different scales
    x = torch.randn(batch, seq, d, generator=g) * scale + torch.arange(d) * 3.0
    ln = F.layer_norm(x, (d,))
    bn = F.batch_norm(x.reshape(-1, d), None, None, training=True).reshape(batch, seq, d)
    out = {"labels": [f"seq {b} · pos {t}" for b in range(batch) for t in range(seq)]}
    for name, t in (("x", x), ("layernorm", ln), ("batchnorm", bn)):
        flat = t.reshape(-1, d)  # (batch*seq, d)
        out[name] = flat
        out[f"{name}_row_mean"], out[f"{name}_row_std"] = flat.mean(1), flat.std(1, unbiased=False)
        out[f"{name}_col_mean"], out[f"{name}_col_std"] = flat.mean(0), flat.std(0, unbiased=False)
    return out


def _layernorm_explicit(x, w, b, eps=1e-5):
    centered = x - x.mean(-1, keepdim=True)
    # The variance spelled out: torch's x.var(-1) is several times slower on some CPU builds.
    return centered / (centered.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w + b


def _rmsnorm_explicit(x, w, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w


def norm_timing(shape=(8, 128, 512), repeats: int = 21, seed: int = 0) -> dict:
    """Wall time per call (ms) of LayerNorm and RMSNorm, fused and written out, on one tensor.

    Two warm-up calls each, then `repeats` timed calls, interleaved so machine load hits all
    four alike. Returns {"names", "samples_ms": {name: [..]}, "median_ms": {name: float}}.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    d = shape[-1]
    w, b = torch.ones(d), torch.zeros(d)
    fns = {
        "LayerNorm (F.layer_norm)": lambda: F.layer_norm(x, (d,), w, b, 1e-5),
        "RMSNorm (F.rms_norm)": lambda: F.rms_norm(x, (d,), w, 1e-5),
        "LayerNorm written out": lambda: _layernorm_explicit(x, w, b),
        "RMSNorm written out": lambda: _rmsnorm_explicit(x, w),
    }
    samples = {name: [] for name in fns}
    with torch.inference_mode():
        for _ in range(2):
            for fn in fns.values():
                fn()
        for _ in range(repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {
        "names": list(fns),
        "shape": tuple(shape),
        "samples_ms": samples,
        "median_ms": {n: statistics.median(s) for n, s in samples.items()},
    }


def mask_demo(t: int = 6, n_pad: int = 2, causal: bool = True, d_head: int = 8, seed: int = 0) -> dict:
    """One head's attention over `t` positions whose last `n_pad` are padding, via `attend`.

    Returns the (t, t) "scores" before masking, the bool "mask" (True = may attend) and its
    parts "causal" / "keys_real", "masked_scores" (-inf where masked) and "pattern", both
    read from the engine's trace.
    """
    if not (1 <= t <= 32) or not (0 <= n_pad < t):
        raise ValueError(f"need 1 <= t <= 32 and 0 <= n_pad < t (at least one real token), got t={t}, n_pad={n_pad}")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, t, d_head, generator=g) for _ in range(3))  # (B=1, H=1, T, hd)
    keys_real = torch.arange(t) < t - n_pad  # (S,) False at padding
    causal_part = causal_mask(t, t, q.device) if causal else torch.ones(t, t, dtype=torch.bool)
    mask = causal_part & keys_real[None, :]  # (T, S)
    rec = Recorder()
    attend(q, k, v, mask[None, None], rec.scoped("attn"))  # mask -> (1, 1, T, S)
    tr = rec.finish()
    return {
        "scores": (q @ k.transpose(-2, -1))[0, 0] / math.sqrt(d_head),
        "mask": mask,
        "causal": causal_part,
        "keys_real": keys_real,
        "masked_scores": tr["attn.scores"][0, 0],
        "pattern": tr["attn.pattern"][0, 0],
    }


HEAD_STEPS = {
    "ln1.output": "the block's input, normalised",
    "attn.qkv": "one fused projection makes q, k and v together",
    "attn.q": "split: view as (B, T, H, hd), then transpose heads forward",
    "attn.k": "keys, split the same way",
    "attn.v": "values, split the same way",
    "attn.scores": "every head scores every query against every key, in parallel",
    "attn.pattern": "softmax over the key axis",
    "attn.z": "each head's weighted sum of values",
    "attn.z_merged": "concat: transpose back and reshape H x hd into d_model",
    "attn_out": "the output projection mixes the heads",
}


@torch.no_grad()
def head_split_shapes(d_model: int, n_head: int, text: str = "Hello", seed: int = 0) -> dict:
    """Shapes of block 0's attention in a real traced forward of a random one-layer GPT.

    Invalid sizes raise ValueError from `ModelConfig` (e.g. d_model not divisible by n_head).
    Returns {"d_head", "n_tokens", "steps": [{"name", "shape", "axes", "stored", "what"}]}.
    """
    if not (1 <= d_model <= 2048):
        raise ValueError(f"d_model={d_model}: choose 1 to 2048 for this demo")
    ids = list(text.encode("utf-8"))
    cfg = ModelConfig(
        vocab_size=257, context_length=max(8, len(ids)), d_model=d_model, n_layer=1, n_head=n_head, d_ff=4 * d_model
    )
    model = GPT(cfg, torch.Generator().manual_seed(seed))
    trace = model.eval()(torch.tensor([ids]), trace=True).trace
    steps = []
    for entry in trace.shapes:
        suffix = entry.name.removeprefix("blocks.0.")
        if suffix in HEAD_STEPS:
            steps.append({**entry.as_dict(), "what": HEAD_STEPS[suffix]})
    return {"d_head": cfg.d_head, "n_tokens": len(ids), "steps": steps}
