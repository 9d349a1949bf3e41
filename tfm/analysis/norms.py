"""Norms: per-layer statistics of every norm in a trace (the LayerNorm page's main figure), norms
across depth of a fresh model, and one norm call redone step by step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..core.config import ModelConfig
from ..core.encoder import head_logits, logit_chunks
from ..core.model import GPT, Norm
from ..core.trace import Recorder, Trace
from ..core.trace_names import name as trace_name
from .heads import Progress
from .shapes import ids_tensor


@dataclass(frozen=True)
class DepthNorms:
    resid_norm: torch.Tensor  # (n_layer+1,) mean L2 norm per token entering block 0 and leaving each block
    grad_norm: torch.Tensor  # (n_layer,) L2 norm of the LM loss's gradient w.r.t. each block's parameters
    loss: float


def depth_config(config: ModelConfig, placement: str, norm: str, n_layer: int) -> ModelConfig:
    """A fresh model of `config`'s size with another norm placement, norm and depth, no dropout.
    A parallel block has no post-norm form: post-norm runs it as the sequential block."""
    return config.replace(
        norm_placement=placement,
        norm=norm,
        n_layer=n_layer,
        dropout=0.0,
        parallel_block=config.parallel_block and placement == "pre",
    )


def depth_norms(config: ModelConfig, ids: list[int] | torch.Tensor, seed: int = 0) -> DepthNorms:
    """Activation and gradient norms across depth of a *fresh random* model of `config`, with
    the LM loss on `ids`. Runs on the CPU, in eval mode (no dropout); the model is built here
    and thrown away, never a shared one. No (T, V) logits are held: the loss is summed over chunks
    of rows (`_chunked_loss`), and only the blocks get gradients (none of the vocabulary-sized embedding).
    """
    ids_t = ids_tensor(ids, config, min_len=2)
    model = GPT(config, torch.Generator().manual_seed(seed))
    model.eval()
    model.requires_grad_(False).blocks.requires_grad_(True)  # this model's own: only the blocks' gradients are read
    rec = Recorder()
    with torch.enable_grad():
        x = model.hidden(ids_t[None], rec=rec)[0]  # (T, D) what the unembedding reads
        loss = _chunked_loss(model, x[:-1], ids_t[1:])  # predict each next token
        loss.backward()
    tr = rec.finish()
    resid = torch.stack([s.norm(dim=-1).mean() for _, s in tr.residual_streams(0)])  # (L+1,)
    grads = torch.stack(
        [
            torch.sqrt(sum((p.grad.double() ** 2).sum() for p in block.parameters() if p.grad is not None)).float()
            for block in model.blocks
        ]
    )  # (L,)
    return DepthNorms(resid.detach(), grads, float(loss.detach()))


def _row_loss(model: GPT, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(head_logits(model, x), targets, reduction="sum")


def _chunked_loss(model: GPT, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of `x`'s (T, D) next-token logits, a chunk of rows at a time; each chunk's
    logits are recomputed in the backward pass (`checkpoint`), so at most one chunk's exist."""
    parts = [
        checkpoint(_row_loss, model, x[rows], targets[rows], use_reentrant=False) for rows in logit_chunks(model, x)
    ]
    return torch.stack(parts).sum() / x.shape[0]


def block_norms(model: GPT) -> tuple[str, ...]:
    """A block's norms in the order they run: ln1, ln2; with Gemma's post_norms four: ln1 (before
    attention), ln1_post (after it), ln2 (before the MLP), ln2_post (after it)."""
    return ("ln1", "ln1_post", "ln2", "ln2_post") if model.config.post_norms else ("ln1", "ln2")


def pick_norm(model: GPT, layer: int, which: str) -> tuple[Norm, str]:
    """The norm module and its trace name for a block's norm (`block_norms`), or ln_final."""
    if which == "ln_final":
        if model.ln_final is None:
            raise ValueError("this post-norm model has no final norm; pick ln1 or ln2")
        return model.ln_final, "ln_final"
    if which not in block_norms(model):
        raise ValueError(f"which={which!r}: choose {', '.join(block_norms(model))} or ln_final")
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer {layer} does not exist; the model has {len(model.blocks)} blocks")
    return getattr(model.blocks[layer], which), f"blocks.{layer}.{which}"


@dataclass(frozen=True)
class NormExample:
    """One norm call redone in float64. LayerNorm fills mean, var, std; RMSNorm mean_square, rms."""

    kind: str
    eps: float
    x: torch.Tensor  # (D,) the norm's input for the token
    weight: torch.Tensor  # (D,) gain
    bias: torch.Tensor | None  # (D,) or None (RMSNorm, bias-free models)
    normalized: torch.Tensor  # (D,) before the gain
    output: torch.Tensor  # (D,) ours
    reference: torch.Tensor  # (D,) torch's F.layer_norm / F.rms_norm on the same input
    max_abs_diff: float  # ours vs torch's function
    trace_diff: float  # ours vs the model's own float32 output in the trace
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
        var = ((x - mean) ** 2).mean()  # biased, as LayerNorm uses
        std = torch.sqrt(var + norm.eps)
        normalized = (x - mean) / std
        reference = F.layer_norm(x, x.shape, w, b, norm.eps)
        stats = dict(mean=float(mean), var=float(var), std=float(std))
    else:
        mean_square = (x**2).mean()
        rms = torch.sqrt(mean_square + norm.eps)
        normalized = x / rms
        reference = F.rms_norm(x, x.shape, w, norm.eps)
        stats = dict(mean_square=float(mean_square), rms=float(rms))
    output = normalized * w + (b if b is not None else 0.0)
    return NormExample(
        norm.kind,
        norm.eps,
        x,
        w,
        b,
        normalized,
        output,
        reference,
        max_abs_diff=float((output - reference).abs().max()),
        trace_diff=float((output - trace[f"{name}.output"][0, token].double()).abs().max()),
        **stats,
    )


def layer_summaries(trace: Trace, progress: Progress | None = None) -> tuple[dict, dict]:
    """`norm_stats` and `residual_norms` in one pass, layer by layer: a lazy trace recomputes a
    block when one of its entries is first read, so each block is visited once, not per statistic."""
    stats: dict[str, list[torch.Tensor]] = {}
    subs: dict[str, list[torch.Tensor]] = {"attn_out": [], "mlp_out": []}
    n = trace.n_layers()
    for layer in range(n):
        for norm in ("ln1", "ln2"):
            got = trace.norm_stats(layer, norm)
            row = {f"input_{part}": got[part] for part in ("mean", "std", "rms") if part in got}
            row |= {
                "output_mean": got["output"].mean(-1),
                "output_std": got["output"].std(-1, unbiased=False),
                "input_norm": got["input"].norm(dim=-1),
            }
            for key, value in row.items():
                stats.setdefault(f"{norm}.{key}", []).append(value)
        for key in subs:
            subs[key].append(trace[trace_name(key, layer)][0].norm(dim=-1))
        if progress is not None:
            progress(layer + 1, n)
    resid = torch.stack([x.norm(dim=-1) for _, x in trace.residual_streams(0)])  # (L+1, T)
    return (
        {k: torch.stack(v) for k, v in stats.items()},
        {"resid": resid} | {k: torch.stack(v) for k, v in subs.items()},
    )


def norm_stats(trace: Trace) -> dict[str, torch.Tensor]:
    """Per layer and token statistics of every norm's input and output, batch 0: name -> (L, T).

    Names: ln1.input_mean, ln1.input_std (LayerNorm) or ln1.input_rms (RMSNorm),
    ln1.output_mean, ln1.output_std, ln1.input_norm, and the same for ln2.
    """
    return layer_summaries(trace)[0]


def residual_norms(trace: Trace) -> dict[str, torch.Tensor]:
    """L2 norms per token, batch 0: `resid` (L+1, T) entering each block and leaving the last,
    and each block's `attn_out` and `mlp_out` (L, T): how much each sublayer writes."""
    return layer_summaries(trace)[1]


@dataclass(frozen=True)
class StatPanel:
    """One heatmap of the norms page's first part: a statistic of a norm's input or output, (L, T)."""

    name: str  # e.g. "ln1.input_std"
    side: str  # "input" or "output"
    stat: str  # "mean", "std" or "rms"
    values: torch.Tensor


@dataclass(frozen=True)
class Summaries:
    """`layer_summaries` typed: every block's norm statistics and the stream's norms per token."""

    stats: dict[str, torch.Tensor]  # "ln1.input_mean", ... (L, T): `norm_stats`' names
    resid: torch.Tensor  # (L+1, T) the stream entering each block and leaving the last
    attn_out: torch.Tensor  # (L, T) what each attention writes
    mlp_out: torch.Tensor  # (L, T) what each MLP writes

    def panels(self, norm: str, kind: str) -> list[StatPanel]:
        """`norm`'s (ln1, ln2) input mean and scale (std for LayerNorm `kind`, else rms), then
        its output mean and std: the statistics the trace holds, in the page's order."""
        wanted = [
            ("input", "mean"),
            ("input", "std" if kind == "layernorm" else "rms"),
            ("output", "mean"),
            ("output", "std"),
        ]
        return [
            StatPanel(f"{norm}.{side}_{stat}", side, stat, self.stats[f"{norm}.{side}_{stat}"])
            for side, stat in wanted
            if f"{norm}.{side}_{stat}" in self.stats
        ]


def summaries(trace: Trace, progress: Progress | None = None) -> Summaries:
    """`layer_summaries` as a `Summaries`."""
    stats, norms = layer_summaries(trace, progress)
    return Summaries(stats, norms["resid"], norms["attn_out"], norms["mlp_out"])


def norm_choices(model: GPT) -> tuple[str, ...]:
    """The norms a page can pick: a block's (`block_norms`), then ln_final where the model has one."""
    return block_norms(model) + (("ln_final",) if model.ln_final is not None else ())


@dataclass(frozen=True)
class NormParameter:
    """One parameter ("weight", the gain, or "bias") of a chosen norm, and the same of every norm."""

    kind: str
    chosen: torch.Tensor  # CPU float32
    labels: tuple[str, ...]  # every norm: "block.norm" or "final"
    every: tuple[torch.Tensor, ...]


def norm_parameters(model: GPT, layer: int, which: str) -> tuple[NormParameter, ...]:
    """The gain and (where the norm has one) the bias of `which` (`pick_norm`) beside every norm's."""
    chosen, _ = pick_norm(model, layer, which)
    every = [(f"{i}.{n}", getattr(b, n)) for i, b in enumerate(model.blocks) for n in block_norms(model)]
    every += [("final", model.ln_final)] if model.ln_final is not None else []
    out = []
    for kind in ("weight", "bias"):
        if getattr(chosen, kind) is not None:
            out.append(
                NormParameter(
                    kind,
                    getattr(chosen, kind).detach().float().cpu(),
                    tuple(n for n, _ in every),
                    tuple(getattr(m, kind).detach().float().cpu() for _, m in every),
                )
            )
    return tuple(out)


def fresh_parameters(config: ModelConfig, n_layer: int) -> int:
    """About how many parameters a fresh `depth_config` model of `n_layer` layers has (blocks and
    embedding): what decides whether the page builds it at once or on a button press."""
    return n_layer * 12 * config.d_model**2 + config.vocab_size * config.d_model
