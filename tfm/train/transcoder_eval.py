"""Running a model's blocks with their MLPs read or replaced, for `python -m tfm.train.transcoders`:
the MLP inputs and outputs a transcoder trains on, its per-layer metrics on held-out text, and the
next-token loss per domain with every MLP (or one at a time) replaced by its transcoder.

The blocks run here are the model's own modules called in the pre-norm order of
`tfm.core.model.Block` (x + attn(ln1(x)), then + mlp(ln2(.))): no hook, no recorder, nothing
changed on the model. `step` is that order once; tests compare what it reads with the trace's
`blocks.L.ln2.output` and `blocks.L.mlp_out`.

The first `skip` positions of each window (an attention sink's huge-norm stream in SmolLM2) are
neither trained on nor replaced: their MLP output stays the model's, and they are out of every
statistic, the CE included.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..core.functional import unembed
from .data import id_windows, next_token_loss

Swap = Callable[[torch.Tensor], torch.Tensor]  # an MLP's input (B, T, D) -> its output in its place


def check_blocks(model_cfg) -> None:
    if model_cfg.norm_placement != "pre" or model_cfg.parallel_block:
        raise ValueError(
            "transcoders are trained on pre-norm models with sequential blocks (the MLP reads "
            "ln2 of the stream after attention); this model is not one: pick another"
        )


def step(block, x: torch.Tensor, angles, layer: int, swap: Swap | None = None):
    """One pre-norm block: (stream out, MLP input, MLP output as used), each (B, T, D)."""
    mid = x + block.attn(block.ln1(x, None), None, angles, None, layer, None)
    m_in = block.ln2(mid, None)
    m = block.mlp(m_in, None) if swap is None else swap(m_in)
    return mid + m, m_in, m


windows = id_windows  # the name tests and tfm.train.tuned_lens_eval import from here


@torch.no_grad()
def embed(model, wins: torch.Tensor, rows: int = 16) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The stream entering block 0 for every window, float32 (n, T, D), and the RoPE angles."""
    parts = [model.embed(wins[i : i + rows], 0, None) for i in range(0, len(wins), rows)]
    return torch.cat([p[0] for p in parts]).float(), parts[0][1]


@torch.no_grad()
def advance(
    model, stream: torch.Tensor, angles, layers: range, keep: set[int], skip: int, rows: int = 16, log=None
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Runs `layers` on `stream` (n, T, D), updated in place (the caller's tensor, never the
    model's), and returns {layer: (MLP inputs, MLP outputs)}, each (n * (T - skip), D) fp16, for
    the layers in `keep`."""
    n, t, d = stream.shape
    out = {
        i: (torch.empty(n * (t - skip), d, dtype=torch.float16), torch.empty(n * (t - skip), d, dtype=torch.float16))
        for i in layers
        if i in keep
    }
    w = t - skip
    for r in range(0, n, rows):
        x = stream[r : r + rows]
        for i in layers:
            x, m_in, m = step(model.blocks[i], x, angles, i)
            if i in out:
                out[i][0][r * w : (r + len(x)) * w] = m_in[:, skip:].flatten(0, 1).half()
                out[i][1][r * w : (r + len(x)) * w] = m[:, skip:].flatten(0, 1).half()
        stream[r : r + rows] = x
        if log is not None and (r // rows) % 25 == 0:
            log(f"layers {layers.start}-{layers.stop - 1}: {min(r + rows, n)}/{n} windows")
    return out


@torch.no_grad()
def layer_metrics(tc, m_in: torch.Tensor, m_out: torch.Tensor, rows: int = 4096) -> dict:
    """On held-out rows: FVU of the MLP output, L0 (features firing per token), the share of
    features that never fired, and the relative error's mean."""
    fired = torch.zeros(tc.cfg.n_features, dtype=torch.bool)
    err = l0 = 0.0
    for r in range(0, len(m_in), rows):
        acts = tc.encode(m_in[r : r + rows].float())
        err += float((tc.decode(acts) - m_out[r : r + rows].float()).pow(2).sum())
        l0 += float((acts > 0).sum())
        fired |= (acts > 0).any(0)
    y = m_out.float()
    var = float((y - y.mean(0)).pow(2).sum())
    return {
        "fvu": err / var,
        "l0": l0 / len(m_in),
        "dead_share": float((~fired).float().mean()),
        "eval_rows": len(m_in),
    }


def _replace(block, tc, skip: int) -> Swap:
    def swap(m_in):
        out = tc(m_in)
        return torch.cat([block.mlp(m_in[:, :skip], None), out[:, skip:]], 1) if skip else out

    return swap


def _with_error(block, tc) -> Swap:
    def swap(m_in):
        approx = tc(m_in)
        return approx + (block.mlp(m_in, None) - approx)  # the error term restores the MLP's output

    return swap


def _run(model, x, angles, start: int, swaps: dict[int, Swap], states: list | None = None) -> torch.Tensor:
    for i in range(start, len(model.blocks)):
        if states is not None:
            states.append(x)
        x = step(model.blocks[i], x, angles, i, swaps.get(i))[0]
    return x


def _ce(model, x: torch.Tensor, targets: torch.Tensor, skip: int) -> float:
    logits = unembed(model.ln_final(x, None)[:, skip:], model.unembed.weight)
    return float(next_token_loss(logits, targets[:, skip:]))


@torch.no_grad()
def domain_ce(model, transcoders, wins: torch.Tensor, skip: int, rows: int = 8) -> dict:
    """Mean next-token loss over windows (n, ctx + 1): clean, every MLP replaced by its transcoder,
    every MLP replaced with its error term added back (equal to clean up to rounding), and one
    layer replaced at a time (a list, by layer)."""
    n_layer = len(model.blocks)
    sums = {"clean": 0.0, "replaced": 0.0, "with_errors": 0.0, "one_layer": [0.0] * n_layer}
    for r in range(0, len(wins), rows):
        b = wins[r : r + rows]
        idx, tgt = b[:, :-1], b[:, 1:]
        x0, angles = model.embed(idx, 0, None)
        states: list = []
        sums["clean"] += _ce(model, _run(model, x0, angles, 0, {}, states), tgt, skip) * len(b)
        blocks = list(enumerate(zip(model.blocks, transcoders)))
        for mode, make in (("replaced", lambda bl, tc: _replace(bl, tc, skip)), ("with_errors", _with_error)):
            swaps = {i: make(bl, tc) for i, (bl, tc) in blocks}
            sums[mode] += _ce(model, _run(model, x0, angles, 0, swaps), tgt, skip) * len(b)
        for i, (bl, tc) in blocks:
            sums["one_layer"][i] += _ce(
                model, _run(model, states[i], angles, i, {i: _replace(bl, tc, skip)}), tgt, skip
            ) * len(b)
    n = len(wins)
    return {
        "windows": n,
        "tokens": n * (wins.shape[1] - 1 - skip),
        "clean": sums["clean"] / n,
        "replaced": sums["replaced"] / n,
        "with_errors": sums["with_errors"] / n,
        "one_layer": [v / n for v in sums["one_layer"]],
    }
