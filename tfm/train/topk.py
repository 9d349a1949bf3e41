"""The training loop TopK dictionaries share (`python -m tfm.train.sae`, `python -m tfm.train.transcoders`):
Adam on shuffled rows, inputs and targets scaled to unit mean square (the scales folded into the
weights at the end by the caller), decoder rows kept unit-norm, and the AuxK loss of Gao et al.
(2024) on features that stopped firing.

A module trained here has `pre(x)` (pre-activations), `W_dec` (F, D), `b_dec` (D,) and `cfg.k`,
and its output is the sum of its k kept activations times their decoder rows, plus b_dec: an SAE
reconstructs its input (x is y), a transcoder maps an MLP's input to its output.
"""

from __future__ import annotations

import time

import torch

DEAD_AFTER = 100_000  # tokens without firing before a feature counts as dead for AuxK


def unit_rows(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """(n, d) random directions of norm 1: a decoder's starting rows."""
    w = torch.randn(n, d, generator=gen)
    return w / w.norm(dim=-1, keepdim=True)


def mean_square_scale(x: torch.Tensor) -> float:
    """The scale that gives x's rows a unit mean square per dimension (from its first 65,536 rows)."""
    return float(x[:65536].float().pow(2).sum(-1).mean().div(x.shape[-1]).sqrt())


def decode_topk(module, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, k) kept pre-activations and their features -> (B, D): ReLU'd, times their decoder rows,
    plus b_dec. A dense product: gathering the k rows per token is as exact but its backward (an
    accumulating scatter into W_dec's gradient) made a step two to three times slower on a CPU."""
    acts = torch.zeros(vals.shape[0], module.W_dec.shape[0], dtype=vals.dtype).scatter(-1, idx, vals.relu())
    return acts @ module.W_dec + module.b_dec


def aux_loss(module, y: torch.Tensor, y_hat: torch.Tensor, pre: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """AuxK: the dead features' top activations reconstruct the main error."""
    n_dead = int(dead.sum())
    if n_dead == 0:
        return y.new_zeros(())
    err = (y - y_hat).detach()
    vals, idx = pre.masked_fill(~dead, -torch.inf).topk(min(2 * module.cfg.k, n_dead), dim=-1)
    rec = decode_topk(module, vals, idx) - module.b_dec
    return ((rec - err) ** 2).sum(-1).mean() / (err - err.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-8)


def _batch_loss(module, xb: torch.Tensor, yb: torch.Tensor, last_fired: torch.Tensor):
    """One batch: the fraction of variance unexplained, the loss (with the dead features' auxiliary
    term) and each feature's rows since it last fired, updated."""
    pre = module.pre(xb)
    vals, idx = pre.topk(module.cfg.k, dim=-1)
    y_hat = decode_topk(module, vals, idx)
    mse = ((y_hat - yb) ** 2).sum(-1).mean() / (yb - yb.mean(0)).pow(2).sum(-1).mean()
    fired = torch.zeros_like(last_fired, dtype=torch.bool).scatter_(0, idx[vals > 0], True)
    last_fired = torch.where(fired, 0, last_fired + len(xb))
    return mse, mse + aux_loss(module, yb, y_hat, pre, last_fired > DEAD_AFTER) / 32, last_fired


def _update(opt: torch.optim.Optimizer, module, loss: torch.Tensor, lr: float) -> None:
    """One Adam step at `lr`, then every decoder row back to unit length."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    with torch.no_grad():
        module.W_dec /= module.W_dec.norm(dim=-1, keepdim=True)


def train_topk(
    module,
    x: torch.Tensor,
    y: torch.Tensor,
    scales: tuple[float, float],
    epochs: float,
    batch: int,
    lr: float,
    gen: torch.Generator,
    log=print,
) -> dict:
    """Adam on shuffled rows of (x / scales[0] -> y / scales[1]); returns the stats, among them the
    share of features that did not fire during the last pass (`dead_share_train`)."""
    opt = torch.optim.Adam(module.parameters(), lr=lr, betas=(0.9, 0.999))
    n, steps = x.shape[0], max(1, int(epochs * x.shape[0] / batch))
    last_fired = torch.zeros(module.cfg.n_features, dtype=torch.long)
    order, t0 = torch.randperm(n, generator=gen), time.perf_counter()
    for step in range(steps):
        j = (step * batch) % n
        if j + batch > n:
            order, j = torch.randperm(n, generator=gen), 0
        rows = order[j : j + batch]
        xb = x[rows].float() / scales[0]
        yb = xb if y is x and scales[0] == scales[1] else y[rows].float() / scales[1]
        mse, loss, last_fired = _batch_loss(module, xb, yb, last_fired)
        _update(opt, module, loss, lr * min(1.0, (steps - step) / (0.2 * steps)))  # decay over the last fifth
        if step % 200 == 0 or step == steps - 1:
            log(
                f"step {step}/{steps} fvu {float(mse.detach()):.4f} dead(train) "
                f"{float((last_fired > DEAD_AFTER).float().mean()):.3f} {time.perf_counter() - t0:.0f}s"
            )
    return {
        "steps": steps,
        "tokens_seen": steps * batch,
        "train_fvu_last": float(mse.detach()),
        "dead_share_train": float((last_fired >= min(n, steps * batch)).float().mean()),
        "train_s": round(time.perf_counter() - t0, 1),
    }
