"""How far each layer's reading is from the model's final prediction, for the logit and the tuned
lens (tfm.analysis.lens.compare): KL divergence per layer on top, top-1 agreement below. The Logit
lens page and the notebook's `lens_comparison` draw it. Also the lens grid itself: each layer's top
prediction at each position (`lens_grid_figure`), or one position's top few (`step_lens_figure`)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from .labels import esc
from .figure_dicts import figure

COLOURS = {"logit": "#1f6fb4", "tuned": "#e4572e"}
NAMES = {"logit": "logit lens", "tuned": "tuned lens"}


def lens_fit_figure(
    kl: dict[str, list[float]], agree: dict[str, list[float]], row_labels: list[str], title: str
) -> object:
    """Two panels over the layers: KL(final ‖ lens) in nats and the share of positions whose top-1
    token is the final one, one line per lens (keys of `kl`: "logit", "tuned")."""
    data = []
    for lens in kl:
        data += _lens_lines(lens, kl[lens], agree[lens], row_labels)
    kl_axis, notes = _kl_axis(kl, row_labels)
    return figure(data, _fit_layout(title, kl_axis, notes))


def _lens_lines(lens: str, kl: list[float], agree: list[float], row_labels: list[str]) -> list[dict]:
    """One lens's two lines: its KL per layer (top panel) and its top-1 agreement (bottom panel)."""
    name = NAMES.get(lens, lens)
    line = dict(color=COLOURS.get(lens, "#555555"), width=2)
    return [
        dict(
            type="scatter",
            x=row_labels,
            y=kl,
            mode="lines+markers",
            name=esc(name),
            meta=lens,
            legendgroup=lens,
            line=line,
            marker=dict(size=6),
            xaxis="x",
            yaxis="y",
            hovertemplate="%{x}: %{y:.3f} nats<extra>" + esc(name) + "</extra>",
        ),
        dict(
            type="scatter",
            x=row_labels,
            y=[100 * v for v in agree],
            mode="lines+markers",
            name=esc(name),
            meta=lens,
            legendgroup=lens,
            showlegend=False,
            line=line,
            marker=dict(size=6),
            xaxis="x2",
            yaxis="y2",
            hovertemplate="%{x}: %{y:.0f}% of positions<extra>" + esc(name) + "</extra>",
        ),
    ]


def _fit_layout(title: str, kl_axis: dict, notes: list[dict]) -> dict:
    axis = dict(type="category", tickangle=-45)
    return dict(
        title=dict(text=title),
        height=560,
        font=dict(size=13),
        legend=dict(orientation="h", y=1.08, x=0),
        annotations=notes,
        xaxis=dict(**axis, anchor="y", domain=[0, 1], showticklabels=False, matches="x2"),
        yaxis=dict(title=dict(text="KL to the final (nats)"), domain=[0.55, 1], **kl_axis),
        xaxis2=dict(**axis, anchor="y2", domain=[0, 1], title=dict(text="layer (residual stream after it)")),
        yaxis2=dict(title=dict(text="top-1 = final (%)"), domain=[0, 0.42], range=[0, 105]),
        margin=dict(t=80, b=10),
    )


def _kl_axis(kl: dict[str, list[float]], row_labels: list[str]) -> tuple[dict, list[dict]]:
    """The KL axis from 0 to just above every layer but the first; when the first (the bare
    embedding, often ten times the rest) is above that, its values are written above the chart's top
    right corner (outside the plot, where no line runs: inside, the line to that point crosses the
    corner it goes up from) instead of flattening every other layer."""
    rest = [v for ys in kl.values() for v in ys[1:]]
    top = 1.15 * max(rest) if rest else 0.0
    first = {k: ys[0] for k, ys in kl.items() if ys}
    if not rest or top <= 0 or all(v <= top for v in first.values()):
        return dict(rangemode="tozero"), []
    text = ", ".join(f"{NAMES.get(k, k)} {v:.1f}" for k, v in first.items())
    return dict(range=[0, top]), [
        dict(
            text=esc(f"{row_labels[0]} (off the scale): {text} nats"),
            x=1,
            y=1,
            xref="paper",
            yref="paper",
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            font=dict(size=12),
        )
    ]


def step_lens_figure(
    top_ids: torch.Tensor,
    top_probs: torch.Tensor,
    row_labels: list[str],
    pieces: list[list[str]],
    chosen: int,
    title: str,
) -> go.Figure:
    """Logit lens of one position: per layer its 5 most likely next tokens, the drawn one bold."""
    hover = [[f"{esc(pc)}: p = {p:.4f}" for pc, p in zip(row, probs)] for row, probs in zip(pieces, top_probs.tolist())]
    cols = [f"choice {j + 1}" for j in range(top_ids.shape[1])]
    return lens_grid_figure(
        top_probs.numpy(),
        pieces,
        hover,
        row_labels,
        cols,
        title,
        "the layer's most likely next tokens",
        bold=(top_ids == chosen).numpy(),
        ctitle="p",
    )


def lens_grid_figure(
    probs: np.ndarray,
    pieces: list[list[str]],
    hover: list[list[str]],
    row_labels: list[str],
    col_labels: list[str],
    title: str,
    xtitle: str,
    bold: np.ndarray | None = None,
    ctitle: str = "top-1 p",
) -> go.Figure:
    """Logit-lens heatmap: rows are layers, cells show the top prediction and its probability.
    Many columns get smaller, shortened cell text (ending in …); the hover has every piece whole."""
    n_col = len(col_labels)
    size, room = (14, 12) if n_col <= 16 else (12, 7) if n_col <= 24 else (11, 5) if n_col <= 32 else (10, 3)
    text = [
        [_cell(p, room, bold is not None and bool(bold[r, c])) for c, p in enumerate(row)]
        for r, row in enumerate(pieces)
    ]
    trace = dict(
        type="heatmap",
        z=probs,
        x=[esc(c) for c in col_labels],
        y=row_labels,
        text=text,
        xgap=1,
        texttemplate="%{text}",
        textfont=dict(size=size),
        customdata=hover,
        colorscale="Viridis",
        zmin=0,
        zmax=1,
        colorbar=dict(title=dict(text=ctitle)),
        hovertemplate="%{y}, %{x}<br>%{customdata}<extra></extra>",
    )
    return figure([trace], _grid_layout(title, xtitle, len(row_labels)))


def _grid_layout(title: str, xtitle: str, n_row: int) -> dict:
    return dict(
        title=dict(text=title),
        height=max(320, 90 + 38 * n_row),
        font=dict(size=13),
        xaxis=dict(title=dict(text=xtitle), type="category", tickangle=-45, side="bottom"),
        yaxis=dict(title=dict(text="layer (residual stream after it)"), type="category"),
        margin=dict(t=60, b=10),
    )


def _cell(piece: str, room: int, bold: bool) -> str:
    short = piece if len(piece) <= room else piece[: room - 1] + "…"
    return f"<b>{esc(short)}</b>" if bold else esc(short)
