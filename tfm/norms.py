"""Computations behind the LayerNorm page: norms across depth of a fresh model, and one norm
call redone step by step (no Streamlit here)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .model import GPT, Norm
from .shapes import ids_tensor
from .trace import Trace


@dataclass(frozen=True)
class DepthNorms:
    resid_norm: torch.Tensor  # (n_layer+1,) mean L2 norm per token entering block 0 and leaving each block
    grad_norm: torch.Tensor   # (n_layer,) L2 norm of the LM loss's gradient w.r.t. each block's parameters
    loss: float


def depth_norms(config: ModelConfig, ids: list[int] | torch.Tensor, seed: int = 0) -> DepthNorms:
    """Activation and gradient norms across depth of a *fresh random* model of `config`, with
    the LM loss on `ids`. Runs on the CPU, in eval mode (no dropout); the model is built here
    and thrown away, never a shared one.
    """
    ids_t = ids_tensor(ids, config, min_len=2)
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
    return DepthNorms(resid.detach(), grads, float(loss.detach()))


def pick_norm(model: GPT, layer: int, which: str) -> tuple[Norm, str]:
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


@dataclass(frozen=True)
class NormExample:
    """One norm call redone in float64. LayerNorm fills mean, var, std; RMSNorm mean_square, rms."""
    kind: str
    eps: float
    x: torch.Tensor            # (D,) the norm's input for the token
    weight: torch.Tensor       # (D,) gain
    bias: torch.Tensor | None  # (D,) or None (RMSNorm, bias-free models)
    normalized: torch.Tensor   # (D,) before the gain
    output: torch.Tensor       # (D,) ours
    reference: torch.Tensor    # (D,) torch's F.layer_norm / F.rms_norm on the same input
    max_abs_diff: float        # ours vs torch's function
    trace_diff: float          # ours vs the model's own float32 output in the trace
    mean: float | None = None
    var: float | None = None
    std: float | None = None
    mean_square: float | None = None
    rms: float | None = None


def layernorm_worked_example(model: GPT, trace: Trace, layer: int, token: int, which: str) -> NormExample:
    """Redo one norm call from the trace (batch 0) step by step in float64, and compare with
    `F.layer_norm` / `F.rms_norm` on the same input with the model's weight (and bias).
    `which` is "ln1", "ln2" (of block `layer`) or "ln_final"."""
    norm, name = pick_norm(model, layer, which)
    x_all = trace[f"{name}.input"][0]
    if not 0 <= token < x_all.shape[0]:
        raise ValueError(f"token {token} does not exist; the prompt has {x_all.shape[0]} tokens")
    x = x_all[token].double()
    w = norm.weight.detach().double().cpu()
    b = norm.bias.detach().double().cpu() if norm.bias is not None else None
    if norm.kind == "layernorm":
        mean = x.mean()
        var = ((x - mean) ** 2).mean()                                  # biased, as LayerNorm uses
        std = torch.sqrt(var + norm.eps)
        normalized = (x - mean) / std
        reference = F.layer_norm(x, x.shape, w, b, norm.eps)
        stats = dict(mean=float(mean), var=float(var), std=float(std))
    else:
        mean_square = (x ** 2).mean()
        rms = torch.sqrt(mean_square + norm.eps)
        normalized = x / rms
        reference = F.rms_norm(x, x.shape, w, norm.eps)
        stats = dict(mean_square=float(mean_square), rms=float(rms))
    output = normalized * w + (b if b is not None else 0.0)
    return NormExample(norm.kind, norm.eps, x, w, b, normalized, output, reference,
                       max_abs_diff=float((output - reference).abs().max()),
                       trace_diff=float((output - trace[f"{name}.output"][0, token].double()).abs().max()),
                       **stats)
