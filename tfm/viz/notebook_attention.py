"""The notebook's attention figures (`tfm.viz.notebook` re-exports them) and the inputs every
notebook figure shares: a tfm trace or Hugging Face attentions (a tuple of (B, H, T, T) tensors,
one per layer), token labels made unique, and the window of positions drawn (at most `WINDOW`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Union

import numpy as np
import plotly.graph_objects as go
import torch

from ..core.trace import Trace
from ..core.validate import check_int
from ..text.token_view import position_labels
from . import attention as fa
from .attention import WINDOW

Attention = Union[Trace, Sequence[torch.Tensor], torch.Tensor]
Mode = Literal["head", "mean", "max"]


def _n_layers(attention: Attention) -> int:
    if isinstance(attention, Trace):
        return attention.n_layers()
    if isinstance(attention, torch.Tensor):
        if attention.dim() != 5:
            raise ValueError(
                f"a stacked attention tensor must be (layers, batch, heads, T, T); got "
                f"{tuple(attention.shape)}: pass Hugging Face's tuple of (B, H, T, T) tensors as it is"
            )
        return attention.shape[0]
    if isinstance(attention, (tuple, list)) and attention and all(isinstance(a, torch.Tensor) for a in attention):
        return len(attention)
    raise ValueError(
        "attention must be a tfm Trace or what Hugging Face returns with output_attentions=True "
        f"(a tuple of (B, H, T, T) tensors, one per layer); got {type(attention).__name__}"
    )


def _layer(attention: Attention, layer: int, batch: int) -> torch.Tensor:
    """(H, T, T) float32 CPU attention of one layer and batch row."""
    n = _n_layers(attention)
    check_int("layer", layer, 0, n - 1, f" (the model has {n} layers)")
    if isinstance(attention, Trace):
        return attention.pattern(layer, batch).detach().float().cpu()
    a = attention[layer]
    if a.dim() != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"layer {layer}'s attention must be (batch, heads, T, T); got {tuple(a.shape)}")
    check_int("batch", batch, 0, a.shape[0] - 1, f" (the attention has batch size {a.shape[0]})")
    return a[batch].detach().float().cpu()


def axis_labels(names: Sequence[str], n: int) -> list[str]:
    """Axis labels, one per position, made unique with the position (`piece ·i`, as in the app):
    plotly merges equal category names, and a prompt repeats tokens."""
    if isinstance(names, str) or len(names) != n:
        raise ValueError(
            f"tokens must be a list of {n} strings, one per position (got "
            f"{'a string' if isinstance(names, str) else len(names)}); e.g. tfm.viz.tokens(lm, ids) "
            "or a Hugging Face tokenizer's convert_ids_to_tokens(ids)"
        )
    return position_labels(names)


def drawn_positions(n: int, positions: tuple[int, int] | None, most: int = WINDOW, lo: int = 0) -> tuple[int, int]:
    """(first, last) positions drawn: the given ones, else the last `most` from `lo` on."""
    if positions is None:
        return min(max(lo, n - most), n - 1), n - 1
    a = check_int("positions[0]", positions[0], 0, n - 1, f" ({n} positions)")
    b = check_int("positions[1]", positions[1], a, n - 1, f" (from positions[0] to the last of {n})")
    if b - a + 1 > most:
        raise ValueError(f"positions {a}..{b} are {b - a + 1}; this figure draws at most {most} at once")
    return a, b


def span_text(a: int, b: int, n: int) -> str:
    return "" if (a, b) == (0, n - 1) else f", positions {a}–{b} of {n}"


def _heads(attention: Attention, layer: int, batch: int, names: Sequence[str], positions, hide_first: bool):
    """One layer's (H, T, T), its window (a, b) and the window's labels."""
    pat = _layer(attention, layer, batch)
    n = pat.shape[-1]
    labels = axis_labels(names, n)
    a, b = drawn_positions(n, positions, lo=int(hide_first))  # hiding key 0 leaves query 0 nothing to read
    return pat, a, b, labels[a : b + 1]


def attention_pattern(
    attention: Attention,
    tokens: Sequence[str],
    layer: int = 0,
    head: int = 0,
    *,
    mode: Mode = "head",
    batch: int = 0,
    positions: tuple[int, int] | None = None,
    hide_first: bool = False,
    log: bool = False,
) -> go.Figure:
    """One head's (query x key) pattern, or the mean / max over the layer's heads (`mode`)."""
    pat, a, b, labels = _heads(attention, layer, batch, tokens, positions, hide_first)
    if mode not in ("head", "mean", "max"):
        raise ValueError(f"mode must be 'head', 'mean' or 'max', not {mode!r}")
    check_int("head", head, 0, pat.shape[0] - 1, f" (the layer has {pat.shape[0]} heads)")
    z = fa.window(fa.reduce_heads(pat, mode, head), a, b, hide_first)
    zmax = fa.window_scale(z)[0] if a > int(hide_first) else 1.0  # rows spread over keys before the window
    what = f"head {head}" if mode == "head" else f"{mode} over heads"
    title = f"Layer {layer}, {what}: query × key{span_text(a, b, pat.shape[-1])}" + (
        ", first token hidden" if hide_first else ""
    )
    return fa.heatmap(z, labels, title, log, zmax=zmax)


def all_heads(
    attention: Attention,
    tokens: Sequence[str],
    layers: Sequence[int] | None = None,
    *,
    batch: int = 0,
    positions: tuple[int, int] | None = None,
    log: bool = False,
) -> go.Figure:
    """Every head of the chosen layers (default: all) as one grid: rows layers, columns heads."""
    layers = list(range(_n_layers(attention))) if layers is None else list(layers)
    if not layers:
        raise ValueError("layers is empty: name at least one layer")
    cells = []
    for layer in layers:
        pat, a, b, labels = _heads(attention, layer, batch, tokens, positions, False)
        cells.append(fa.window(pat, a, b))
    what = f"Layer {layers[0]}, every head" if len(layers) == 1 else "Every head: rows are layers, columns heads"
    grid = fa.model_view(np.stack(cells), labels, what + span_text(a, b, pat.shape[-1]), log)
    if layers != list(range(len(layers))):  # the builder numbers rows from 0: name the real layers
        _rename_rows(grid, layers)
    return grid


def _rename_rows(grid: go.Figure, layers: list[int]) -> None:
    """model_view's row i (categories "L{i} query ...", ticks "layer {i}") is layer layers[i]."""

    def real(y: str) -> str:
        head, _, rest = y.partition(" query ")
        return f"L{layers[int(head[1:])]} query {rest}" if rest and head[1:].isdigit() else y

    grid.data[0].y = [real(y) for y in grid.data[0].y]
    axis = grid.layout.yaxis
    axis.tickvals = [real(y) for y in axis.tickvals]
    axis.ticktext = [f"layer {layer}" for layer in layers]


def layer_heads(attention: Attention, tokens: Sequence[str], layer: int = 0, **kw) -> go.Figure:
    """Every head of one layer, side by side."""
    return all_heads(attention, tokens, [layer], **kw)


def head_view(
    attention: Attention,
    tokens: Sequence[str],
    layer: int = 0,
    heads: Sequence[int] | None = None,
    *,
    token: int | None = None,
    batch: int = 0,
    positions: tuple[int, int] | None = None,
) -> go.Figure:
    """BertViz-style lines from each query token (left) to the keys it reads (right), one colour
    per head (default: every head of the layer); `token` (a position) keeps only its lines."""
    pat, a, b, labels = _heads(attention, layer, batch, tokens, positions, False)
    heads = list(range(pat.shape[0])) if heads is None else [check_int("head", h, 0, pat.shape[0] - 1) for h in heads]
    row = None if token is None else check_int("token", token, a, b, " (a position drawn)") - a
    return fa.head_view(
        fa.window(pat, a, b), heads, labels, f"Layer {layer}: who looks at whom{span_text(a, b, pat.shape[-1])}", row
    )
