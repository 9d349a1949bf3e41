"""Figures for encoders and for how attention is made: a sentence pair's head view (sentence A
against sentence B, as BertViz draws it), the neuron view, sentence similarity, and Clark et
al.'s per-head averages. Pure: arrays and labels in, figures out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis.encoders.bert_heads import HELP, LookAt
from ..analysis.neuron_view import NeuronView
from .attention import COLORSCALE, HEAD_COLOURS, _lines, head_view_frame, plotly_text
from ..text.token_view import position_labels
from .figure_dicts import figure

DIVERGING = [[0.0, "rgb(178,24,43)"], [0.5, "rgb(247,247,247)"], [1.0, "rgb(33,102,172)"]]


def pair_head_view(cells: np.ndarray, heads: list[int], left: list[str], right: list[str], title: str) -> go.Figure:
    """Lines from each token of one sentence (left, queries) to each token of the other (right,
    keys); `cells` (H, len(left), len(right)) the pattern's block, opacity = weight."""
    data: list[dict] = []
    for i, head in enumerate(heads):
        q, k = np.nonzero(~np.isnan(cells[head]))
        data += _lines(q, k, cells[head, q, k], HEAD_COLOURS[i % len(HEAD_COLOURS)], f"head {head}")
    return head_view_frame(data, [plotly_text(t) for t in left], [plotly_text(t) for t in right], title)


def neuron_figure(v: NeuronView, shown: int, title: str) -> go.Figure:
    """q_i, k_i and q_i * k_i for the `shown` dimensions with the largest |q_i k_i|, sorted by the
    product (largest first); the hover gives each dimension's index."""
    order = np.asarray(v.order)
    big = order[np.argsort(-np.abs(v.products.numpy()[order]), kind="stable")[:shown]]
    dims = big[np.argsort(-v.products.numpy()[big], kind="stable")]
    x = [f"d{int(d)}" for d in dims]
    prod = v.products.numpy()[dims]
    data = [
        dict(
            type="bar",
            x=x,
            y=prod,
            name="q × k",
            marker=dict(color=np.where(prod >= 0, "#2166ac", "#b2182b")),
            hovertemplate="dimension %{x}<br>q·k term: %{y:.4f}<extra></extra>",
        ),
        _dots(x, v.q.numpy()[dims], "q", "circle", "#ff7f0e"),
        _dots(x, v.k.numpy()[dims], "k", "diamond", "#2ca02c"),
    ]
    return figure(
        data,
        dict(
            title=dict(text=title),
            height=420,
            margin=dict(l=10, r=10, t=70, b=10),
            bargap=0.15,
            xaxis=dict(title=dict(text="dimension of the head (largest |q × k| terms, sorted)"), tickangle=-60),
            yaxis=dict(title=dict(text="value"), zeroline=True),
            legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        ),
    )


def _dots(x: list[str], y: np.ndarray, name: str, symbol: str, colour: str) -> dict:
    """q or k at each shown dimension, as markers over the product bars."""
    return dict(
        type="scatter",
        x=x,
        y=y,
        mode="markers",
        name=name,
        marker=dict(symbol=symbol, size=8, color=colour),
        hovertemplate=f"dimension %{{x}}<br>{name}: %{{y:.4f}}<extra></extra>",
    )


def softmax_row_figure(v: NeuronView, labels: list[str], title: str) -> go.Figure:
    """The query's whole row: each key's score (q·k / sqrt(d)) and its softmax weight; the key
    chosen in the neuron view is outlined."""
    scores = v.scores_row.numpy()
    weights = v.pattern_row.numpy()
    lab = [f"{i}: {plotly_text(s)}" for i, s in enumerate(labels)]
    line = [3 if i == v.key else 0 for i in range(len(lab))]
    data = [
        dict(
            type="bar",
            x=lab,
            y=weights,
            name="softmax weight",
            marker=dict(color="#4292c6", line=dict(color="#000", width=line)),
            customdata=np.where(np.isfinite(scores), scores, np.nan),
            hovertemplate="key %{x}<br>score: %{customdata:.4f}<br>weight: %{y:.4f}<extra></extra>",
        )
    ]
    return figure(
        data,
        dict(
            title=dict(text=title),
            height=380,
            margin=dict(l=10, r=10, t=60, b=10),
            xaxis=dict(title=dict(text="key"), tickangle=-60),
            yaxis=dict(title=dict(text="attention weight"), range=[0, 1]),
        ),
    )


def cosine_figure(cos: np.ndarray, names: list[str], title: str) -> go.Figure:
    lab = [plotly_text(s) for s in names]
    data = [
        dict(
            type="heatmap",
            z=cos,
            x=lab,
            y=lab,
            zmin=-1,
            zmax=1,
            colorscale=DIVERGING,
            texttemplate="%{z:.2f}",
            hovertemplate="%{y}<br>%{x}<br>cosine: %{z:.4f}<extra></extra>",
        )
    ]
    return figure(
        data,
        dict(
            title=dict(text=title),
            height=int(np.clip(60 * len(names) + 200, 320, 900)),
            margin=dict(l=10, r=10, t=60, b=10),
            yaxis=dict(autorange="reversed"),
            xaxis=dict(tickangle=-30),
        ),
    )


def contribution_figure(c: np.ndarray, rows: list[str], cols: list[str], title: str) -> go.Figure:
    """(T_a, T_b) token-pair shares of a cosine (they sum to it); labels get their position (·i):
    plotly merges equal category names, and a sentence repeats words."""
    lim = float(np.abs(c).max()) or 1.0
    rows, cols = position_labels(rows), position_labels(cols)
    data = [
        dict(
            type="heatmap",
            z=c,
            x=[plotly_text(s) for s in cols],
            y=[plotly_text(s) for s in rows],
            zmin=-lim,
            zmax=lim,
            colorscale=DIVERGING,
            hovertemplate="%{y} · %{x}<br>share: %{z:.5f}<extra></extra>",
        )
    ]
    return figure(
        data,
        dict(
            title=dict(text=title),
            height=int(np.clip(22 * len(rows) + 220, 360, 1200)),
            margin=dict(l=10, r=10, t=60, b=10),
            yaxis=dict(autorange="reversed"),
            xaxis=dict(tickangle=-60),
        ),
    )


def look_at_figure(look: LookAt, kinds: tuple[str, ...], title: str) -> go.Figure:
    """One (layer x head) heatmap per kind of attention, side by side, as Clark et al.'s Figure 2."""
    n_layer, n_head = look.scores[kinds[0]].shape
    data = []
    for i, kind in enumerate(kinds):
        axis = "" if i == 0 else str(i + 1)
        data.append(
            dict(
                type="heatmap",
                z=look.scores[kind].numpy(),
                x=list(range(n_head)),
                y=list(range(n_layer)),
                zmin=0,
                zmax=1,
                colorscale=COLORSCALE,
                showscale=i == len(kinds) - 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                name=kind,
                hovertemplate=f"{kind}<br>layer %{{y}}, head %{{x}}<br>average share: %{{z:.3f}}<extra></extra>",
            )
        )
    return figure(data, _panels_layout(kinds, n_layer, title))


def _panels_layout(kinds: tuple[str, ...], n_layer: int, title: str) -> dict:
    """One panel per kind, side by side, each titled; only the first names its layers."""
    width = 1.0 / len(kinds)
    layout = dict(
        title=dict(text=title),
        height=int(np.clip(34 * n_layer + 160, 300, 900)),
        margin=dict(l=10, r=10, t=90, b=10),
        annotations=[
            dict(
                text=f"<b>{k}</b>",
                x=(i + 0.5) * width,
                y=1.0,
                xref="paper",
                yref="paper",
                showarrow=False,
                yanchor="bottom",
            )
            for i, k in enumerate(kinds)
        ],
    )
    for i in range(len(kinds)):
        axis = "" if i == 0 else str(i + 1)
        layout[f"xaxis{axis}"] = dict(domain=[i * width + 0.01, (i + 1) * width - 0.01], title=dict(text="head"))
        layout[f"yaxis{axis}"] = dict(
            autorange="reversed", title=dict(text="layer" if i == 0 else ""), anchor=f"x{axis}", showticklabels=i == 0
        )
    return layout


KIND_HELP = HELP
