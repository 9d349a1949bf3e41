"""The TopK dictionary's training step with its gradients computed sparsely (`python -m
tfm.train.transcoders_stream`): the same loss, gradients and Adam update as `tfm.train.topk`'s
dense step (tests compare them), at a fraction of its cost.

Only k of F pre-activations per row survive TopK, so the gradient reaching the encoder is non-zero
in k columns per row and the decoder reads k rows per row. The dense step pays for four (B, F, D)
products (the decoder forward, its two backward products and the encoder's weight gradient); here
the encoder's forward is the one dense product, and the rest touch B * k rows: the decoder is an
`embedding_bag` with the kept activations as `per_sample_weights`, the gradient of those weights is
`embedding_bag`'s own backward, and the two weight gradients are sparse (F, B) matrices times
(B, D) ones. No autograd graph is kept for the encoder's product, so nothing stores (B, F).

Parameters are held as `enc` (F, D) (the transcoder's W_enc transposed, so that a feature's
gradient is one contiguous row), `b_enc` (F,), `dec` (F, D) = W_dec, `b_dec` (D,).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .topk import DEAD_AFTER, unit_rows

AUX_WEIGHT = 1 / 32  # the AuxK term's weight, as tfm.train.topk's loss has it
NAMES = ("enc", "b_enc", "dec", "b_dec")


def new_params(n_features: int, d_model: int, gen: torch.Generator, b_dec: torch.Tensor) -> dict[str, torch.Tensor]:
    """Random unit decoder rows and encoder columns (drawn in tfm.train.transcoders' order)."""
    dec = unit_rows(n_features, d_model, gen)
    enc = unit_rows(n_features, d_model, gen)
    return {"enc": enc, "b_enc": torch.zeros(n_features), "dec": dec, "b_dec": b_dec.float().clone()}


def adam(params: dict[str, torch.Tensor], lr: float) -> torch.optim.Adam:
    return torch.optim.Adam([params[n] for n in NAMES], lr=lr, betas=(0.9, 0.999), fused=True)


def _bag(idx: torch.Tensor, weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B, k) row indices and their weights -> (B, D): sum_j weights[b, j] * rows[idx[b, j]]."""
    return F.embedding_bag(idx, rows, per_sample_weights=weights, mode="sum")


def _bag_weight_grad(idx: torch.Tensor, weights: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """d(grad . _bag(idx, weights, rows)) / d weights, (B, k): each kept row dotted with its row's grad."""
    w = weights.detach().requires_grad_(True)
    with torch.enable_grad():
        out = _bag(idx, w, rows.detach())
        return torch.autograd.grad(out, w, grad)[0]


def _scatter_rows(n: int, idx: torch.Tensor, w: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """(n, D): row f is the sum over (b, j) with idx[b, j] == f of w[b, j] * rhs[b]."""
    b, k = idx.shape
    rows = torch.arange(b).repeat_interleave(k)
    m = torch.sparse_coo_tensor(torch.stack([idx.flatten(), rows]), w.flatten(), (n, b), check_invariants=False)
    return torch.sparse.mm(m, rhs)


def _add_kept(grads: dict, idx: torch.Tensor, acts: torch.Tensor, vals: torch.Tensor, g: torch.Tensor, x) -> None:
    """Adds what an output gradient g (B, D) through kept features (idx, ReLU'd acts, raw vals)
    gives the decoder rows, the encoder rows and the encoder bias."""
    n = grads["dec"].shape[0]
    grads["dec"] += _scatter_rows(n, idx, acts, g)
    dv = _bag_weight_grad(idx, acts, grads["_dec"], g) * (vals > 0)
    grads["enc"] += _scatter_rows(n, idx, dv, x)
    grads["b_enc"].index_add_(0, idx.flatten(), dv.flatten())


def _aux(grads: dict, pre, dead: torch.Tensor, k: int, err: torch.Tensor, x: torch.Tensor) -> None:
    """AuxK (Gao et al. 2024): the dead features' top 2k activations reconstruct the main error
    y - y_hat (held constant); its gradient, weighted AUX_WEIGHT, added to grads."""
    cols = dead.nonzero().squeeze(1)
    vals, j = pre[:, cols].topk(min(2 * k, len(cols)), dim=-1, sorted=False)
    idx, acts = cols[j], vals.relu()
    var = (err - err.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-8)
    g = (_bag(idx, acts, grads["_dec"]) - err) * (2 * AUX_WEIGHT / (len(x) * var))
    _add_kept(grads, idx, acts, vals, g, x)


@torch.no_grad()
def step_grads(p: dict, x: torch.Tensor, y: torch.Tensor, k: int, last_fired: torch.Tensor, dead_after=DEAD_AFTER):
    """One batch (x, y already scaled, float32): (its FVU, the gradients of tfm.train.topk's loss
    by parameter name, each feature's rows since it last fired updated)."""
    n, b = p["enc"].shape[0], len(x)
    pre = torch.addmm(p["b_enc"], x, p["enc"].t())  # (B, F): the one dense product
    vals, idx = pre.topk(k, dim=-1, sorted=False)
    acts = vals.relu()
    err = _bag(idx, acts, p["dec"]) + p["b_dec"] - y
    var = (y - y.mean(0)).pow(2).sum(-1).mean()
    fvu = float(err.pow(2).sum(-1).mean() / var)
    fired = torch.zeros(n, dtype=torch.bool).index_fill_(0, idx[vals > 0], True)
    last_fired = torch.where(fired, 0, last_fired + b)
    g = err * (2 / (b * var))
    grads = {"enc": torch.zeros_like(p["enc"]), "b_enc": torch.zeros(n), "dec": torch.zeros_like(p["dec"])}
    grads["b_dec"], grads["_dec"] = g.sum(0), p["dec"]
    _add_kept(grads, idx, acts, vals, g, x)
    dead = last_fired > dead_after
    if bool(dead.any()):
        _aux(grads, pre, dead, k, -err, x)
    del grads["_dec"]
    return fvu, grads, last_fired


@torch.no_grad()
def apply(opt: torch.optim.Adam, p: dict, grads: dict, lr: float) -> None:
    """One Adam step at `lr`, then every decoder row back to unit length (as tfm.train.topk does)."""
    for name in NAMES:
        p[name].grad = grads[name]
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    for name in NAMES:
        p[name].grad = None
    p["dec"] /= p["dec"].norm(dim=-1, keepdim=True)


def to_module(p: dict, module, scales: tuple[float, float]):
    """Copies the parameters into a TopK module (W_enc (D, F) ...), the input and output scales
    folded in: (x / sx) W_enc = x (W_enc / sx); outputs times sy."""
    sx, sy = scales
    with torch.no_grad():
        module.W_enc.copy_(p["enc"].t() / sx)
        module.b_enc.copy_(p["b_enc"])
        module.W_dec.copy_(p["dec"] * sy)
        module.b_dec.copy_(p["b_dec"] * sy)
    return module.eval().requires_grad_(False)
