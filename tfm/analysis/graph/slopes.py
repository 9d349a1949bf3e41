"""What a graph's feature does to its target in the real model, to first order.

The graph's edges are exact in the frozen replacement model: attention patterns and norm scales
held at their values for the prompt, as circuit-tracer holds them. Switching a feature off in the
real model moves those too; above all the final norm's scale, which rescales the whole logit, so
the edges alone rank the real effects of ablations poorly (docs/benchmarks.md). A feature's
*slope* is the derivative of the target (logit or logit difference) with respect to its
activation in the real model, along its decoder row at its block and position, with patterns,
norm scales and the later real MLPs all live. One backward pass gives every slope: the gradient
of the target at each block's output, dotted with each active feature's decoder row.

    slope x (new value - activation)   the real model's first-order change for one edit
    slope - total edge effect per unit what flows through the parts the graph holds frozen
"""

from __future__ import annotations

import torch

from ...core.functional import unembed


def _target(logits: torch.Tensor, token: int, versus: int | None) -> torch.Tensor:
    return logits[token] - logits[versus] if versus is not None else logits[token]


def block_output_gradients(model, ids: torch.Tensor, token: int, versus: int | None) -> list[torch.Tensor]:
    """Per block, (T, D) d target / d (that block's output) in the real model: where a feature
    writes (its MLP output joins the stream there). Only the probes take gradients: nothing is
    set on the shared model."""
    x_ids = ids.reshape(1, -1).to(next(model.parameters()).device)
    with torch.enable_grad():
        x, angles = model.embed(x_ids, 0, None)
        probes = []
        for i, block in enumerate(model.blocks):
            probe = torch.zeros_like(x, requires_grad=True)  # (1, T, D)
            probes.append(probe)
            x = block(x, None, angles, None, i) + probe
        x = model.ln_final(x) if model.ln_final is not None else x
        logits = unembed(x[:, -1:], model.unembed.weight)[0, -1]  # (V,) the last position's
        grads = torch.autograd.grad(_target(logits, token, versus), probes)
    return [g[0].detach().to("cpu", torch.float64) for g in grads]


def real_slopes(
    model, ids: torch.Tensor, transcoders, token: int, versus: int | None, features: torch.Tensor
) -> torch.Tensor:
    """(n_f,) float64: each feature node's (layer, pos, feature rows of `features`) slope."""
    grads = block_output_gradients(model, ids, token, versus)
    slopes = torch.zeros(features.shape[0], dtype=torch.float64)
    for layer, g in enumerate(grads):
        sel = (features[:, 0] == layer).nonzero().flatten()
        if sel.numel():
            rows = transcoders.layers[layer].W_dec[features[sel, 2]].double()  # (n, D)
            slopes[sel] = (g[features[sel, 1]] * rows).sum(1)
    return slopes
