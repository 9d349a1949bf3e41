"""`Norm`: LayerNorm or RMSNorm (`tfm.core.model`'s blocks, final norm and QK-norms), and what a
traced call records: the output, the per-token statistics, and the normalised input (computed
when first read)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .trace import Recorder


def has_bias(cfg: ModelConfig) -> bool:
    """Whether `cfg`'s norms add a bias: only a LayerNorm does, and only with `cfg.bias`."""
    return cfg.bias and cfg.norm == "layernorm"


class Norm(nn.Module):
    """LayerNorm or RMSNorm. Traced calls record the per-token statistics and the normalised
    input (computed when first read) besides the output."""

    def __init__(self, cfg: ModelConfig, dim: int | None = None) -> None:
        """`dim`: the width normalised (default d_model; a QK-norm's is the head size)."""
        super().__init__()
        self.kind, self.eps, dim = cfg.norm, cfg.norm_eps, dim or cfg.d_model
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if has_bias(cfg) else None

    def forward(self, x: torch.Tensor, rec: Recorder | None = None) -> torch.Tensor:
        if rec is not None:
            return self._traced(x, rec)
        if self.kind == "layernorm":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)

    def _traced(self, x: torch.Tensor, rec: Recorder) -> torch.Tensor:
        rec.add("input", x)
        xd = x.detach()  # the deferred entries below must not hold the autograd graph
        if self.kind == "layernorm":
            # The fused kernel also returns the statistics it used, (B, T, 1) each: an explicit
            # var_mean costs many times the whole fused norm on CPU.
            out, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
            mean, rstd = mean.detach().to(x.dtype), rstd.detach().to(x.dtype)  # CUDA keeps them float32
            rec.add("mean", mean.squeeze(-1))
            rec.add("std", rstd.reciprocal().squeeze(-1))
            rec.add_deferred("normalized", tuple(x.shape), x.dtype, lambda: (xd - mean) * rstd)
        else:
            out = F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
            if rec.stores("rms") or rec.stores("normalized"):
                rms = (xd.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()  # (B, T, 1)
                rec.add("rms", rms.squeeze(-1))
                rec.add_deferred("normalized", tuple(x.shape), x.dtype, lambda: xd / rms)
            else:  # a lazy trace's first pass: listed, computed when read (as attend's pattern)
                rec.add_lazy("rms", tuple(x.shape[:-1]), x.dtype)
                rec.add_lazy("normalized", tuple(x.shape), x.dtype)
        rec.add("output", out)
        return out
