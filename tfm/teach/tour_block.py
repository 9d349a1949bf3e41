"""The tour's steps inside a block after attention: the residual add, the norm (LayerNorm or
RMSNorm, before or after the sum) and the MLP (plain or gated)."""

from __future__ import annotations

import torch

from ..core.trace import Trace
from .tour_shown import Focus, Shown, TourStep, vec


def block_steps(lm, tr: Trace, f: Focus) -> list[TourStep]:
    """After attention: the residual add, the norm that follows it (before the MLP in a pre-norm
    model, right after the sum in a post-norm one) and the MLP."""
    cfg, p, b = lm.config, f.pos, f"blocks.{f.layer}"
    resid = {"x (resid_pre)": vec(tr[f"{b}.resid_pre"][0, p]), "attn_out": vec(tr[f"{b}.attn_out"][0, p])}
    kind = "LayerNorm" if cfg.norm == "layernorm" else "RMSNorm"
    if cfg.norm_placement == "pre":
        resid["x + attn_out (resid_mid)"] = vec(tr[f"{b}.resid_mid"][0, p])
        add = TourStep(
            "residual",
            "Residual add",
            r"x \leftarrow x + \mathrm{attn}(\mathrm{LN_1}(x))",
            "The attention output is added to the stream, not written over it: every layer only nudges "
            "the vector, and the original information keeps flowing.",
            resid,
            "pages/norms.py",
        )
        norm = _norm_step(lm, tr, f, "ln2", f"{kind} before the MLP", "before the MLP (pre-norm)")
    else:
        resid["x + attn_out"] = vec(tr[f"{b}.ln1.input"][0, p])
        add = TourStep(
            "residual",
            "Residual add, then the norm",
            r"x \leftarrow \mathrm{LN_1}(x + \mathrm{attn}(x))",
            "The attention output is added to the stream; in this post-norm model the sum is "
            "normalised right away (the 2017 design).",
            resid,
            "pages/norms.py",
        )
        norm = _norm_step(lm, tr, f, "ln1", f"{kind} after the residual sum", "after the residual sum (post-norm)")
    return [add, norm, _mlp_step(lm, tr, f)]


def _norm_step(lm, tr: Trace, f: Focus, name: str, title: str, where: str) -> TourStep:
    """The norm `blocks.{layer}.{name}` at the focus position: statistics, gain, bias, output."""
    cfg, p = lm.config, f.pos
    b, module = f"blocks.{f.layer}.{name}", getattr(lm.model.blocks[f.layer], name)
    x = tr[f"{b}.input"][0, p]
    shown = {"input x": vec(x)}
    if cfg.norm == "layernorm":
        mean, std = tr[f"{b}.mean"][0, p], tr[f"{b}.std"][0, p]
        var = std.pow(2) - cfg.norm_eps
        shown["mean μ, variance σ²"] = Shown(torch.stack([mean, var]).float(), (2,), ("μ", "σ²"))
        formula = r"y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}" + (
            r" + \beta" if module.bias is not None else ""
        )
        text = (
            f"LayerNorm {where}: subtract the mean of the {cfg.d_model} numbers, divide by their standard "
            "deviation, then scale by a learned gain γ"
            + (" and shift by a learned bias β." if module.bias is not None else ".")
        )
    else:
        shown["rms"] = Shown(tr[f"{b}.rms"][0, p].reshape(1).float(), (1,), ("rms",))
        formula = r"y = \gamma \odot \frac{x}{\sqrt{\tfrac{1}{d}\sum_k x_k^2 + \epsilon}}"
        text = (
            f"RMSNorm {where}: divide by the root mean square of the {cfg.d_model} numbers (no mean is "
            "subtracted and there is no bias), then scale by a learned gain γ."
        )
    shown["normalised"] = vec(tr[f"{b}.normalized"][0, p])
    shown["gain γ"] = vec(module.weight.detach().cpu())
    if module.bias is not None:
        shown["bias β"] = vec(module.bias.detach().cpu())
    shown["output y"] = vec(tr[f"{b}.output"][0, p])
    return TourStep("norm", title, formula, text, shown, "pages/norms.py")


def _mlp_step(lm, tr: Trace, f: Focus) -> TourStep:
    cfg, p, b = lm.config, f.pos, f"blocks.{f.layer}"
    gated = {"swiglu": ("SiLU", "SiLU", "SwiGLU"), "geglu": (r"GELU_{\tanh}", "tanh GELU", "GeGLU")}.get(cfg.activation)
    shown = {"pre-activation h" if gated is None else "gate h": vec(tr[f"{b}.mlp.pre"][0, p])}
    if gated is not None:
        shown["up u"] = vec(tr[f"{b}.mlp.up"][0, p])
        formula = rf"\mathrm{{mlp}}(x) = \big(\mathrm{{{gated[0]}}}(x W_{{gate}}) \odot x W_{{up}}\big)\, W_{{down}}"
        act = f"the {gated[1]} of a gate times an up-projection ({gated[2]})"
    else:
        fn = {"gelu": r"\mathrm{GELU}", "gelu_tanh": r"\mathrm{GELU}_{\tanh}", "relu": r"\mathrm{ReLU}"}[cfg.activation]
        formula = (
            rf"\mathrm{{mlp}}(x) = {fn}(x W_1"
            + (r" + b_1" if cfg.bias else "")
            + r")\, W_2"
            + (r" + b_2" if cfg.bias else "")
        )
        act = f"the {cfg.activation.replace('_tanh', ' (tanh)').upper()} activation"
    shown["after activation"] = vec(tr[f"{b}.mlp.post"][0, p])
    shown["mlp_out"] = vec(tr[f"{b}.mlp_out"][0, p])
    shown["resid_post"] = vec(tr[f"{b}.resid_post"][0, p])
    text = (
        f"Each position on its own: expand from {cfg.d_model} to d_ff = {cfg.d_ff}, apply {act}, contract back "
        f"to {cfg.d_model}. "
        + (
            "The result is added to the residual stream."
            if cfg.norm_placement == "pre"
            else "The sum with the stream is normalised again (ln2)."
        )
    )
    return TourStep("mlp", "MLP: expand, activate, contract", formula, text, shown, "pages/shapes.py")
