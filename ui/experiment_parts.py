"""The Experiments page's runs (`tfm.teach.experiments`), each on one thread inside the server's
heavy gate, with the server's bounds on what a widget sent (a ValueError says which)."""

from __future__ import annotations

from tfm.loaders.limits import check_count
from tfm.teach import experiments
from tfm.teach.toy import torch_threads
from ui import heavy


def _compute(fn, *args, **kwargs):
    """Run one experiment on a single thread: its tensors are tiny, and a core stays free."""
    with heavy.slot("an experiment"), torch_threads(1):
        return fn(*args, **kwargs)


def softmax_scaling() -> dict:
    return _compute(experiments.softmax_scaling)


def residual_gradients(n_layers: int) -> dict:
    return _compute(experiments.residual_gradients, n_layers=check_count("layers", n_layers, 100, 10))


def norm_placement_depth(n_layer: int) -> dict:
    return _compute(experiments.norm_placement_depth, n_layer=check_count("layers", n_layer, 48, 12))


def norm_axes() -> dict:
    return _compute(experiments.norm_axes)


def norm_timing() -> dict:
    return _compute(experiments.norm_timing)


def mask_demo(n_pad: int, causal: bool) -> dict:
    return _compute(experiments.mask_demo, t=6, n_pad=n_pad, causal=causal)


def head_split_shapes(d_model: int, n_head: int) -> dict:
    """ValueError for a count over the bounds or heads that do not divide d_model."""
    check_count("d_model", d_model, 2048)
    check_count("heads", n_head, 64)
    return _compute(experiments.head_split_shapes, d_model, n_head)
