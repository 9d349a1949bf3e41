"""Figures for the encoder-decoder page: loss curve and cross-attention heatmaps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

FONT = dict(size=15)


def loss_figure(losses: list[float], title: str = "Training loss") -> go.Figure:
    """Per-step cross-entropy (log scale: the last digits of accuracy are the last decades)."""
    steps = np.arange(1, len(losses) + 1)
    fig = go.Figure(
        go.Scatter(
            x=steps,
            y=np.asarray(losses, dtype=float),
            mode="lines",
            name="loss",
            hovertemplate="step %{x}<br>loss %{y:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="training step",
        yaxis_title="cross-entropy per target token (nats)",
        yaxis_type="log",
        yaxis_dtick=1,
        height=340,
        font=FONT,
        margin=dict(t=60, b=50, l=70, r=20),
    )
    return fig


def _heatmap(pattern: np.ndarray, src_labels: list[str], tgt_labels: list[str], show_scale: bool) -> go.Heatmap:
    return go.Heatmap(
        z=pattern,
        x=list(range(len(src_labels))),
        y=list(range(len(tgt_labels))),
        zmin=0.0,
        zmax=1.0,
        colorscale="Blues",
        showscale=show_scale,
        colorbar=dict(title="weight"),
        customdata=np.array([[f"{t} ← {s}" for s in src_labels] for t in tgt_labels]),
        hovertemplate="output %{customdata}<br>weight %{z:.4f}<extra></extra>",
    )


def short_label(label: str) -> str:
    """'7 ·3' -> '7', 'pad ·9' -> '–': one character per column fits four heads side by side."""
    piece = label.split(" ·")[0]
    return "–" if piece == "pad" else piece


def _axes(fig: go.Figure, src_labels, tgt_labels, row: int, col: int, first: bool) -> None:
    fig.update_xaxes(
        tickvals=list(range(len(src_labels))),
        ticktext=[short_label(s) for s in src_labels],
        title_text="source (keys)",
        tickangle=0,
        row=row,
        col=col,
    )
    fig.update_yaxes(
        tickvals=list(range(len(tgt_labels))),
        ticktext=tgt_labels if first else [""] * len(tgt_labels),
        autorange="reversed",
        title_text="output (queries)" if first else None,
        row=row,
        col=col,
    )


def cross_attention_grid(patterns: np.ndarray, src_labels: list[str], tgt_labels: list[str], title: str) -> go.Figure:
    """(H, T, S) cross-attention patterns of one decoder layer, one heatmap per head."""
    n_head = patterns.shape[0]
    fig = make_subplots(
        rows=1, cols=n_head, subplot_titles=[f"head {h}" for h in range(n_head)], horizontal_spacing=0.025
    )
    for h in range(n_head):
        fig.add_trace(_heatmap(patterns[h], src_labels, tgt_labels, show_scale=h == n_head - 1), row=1, col=h + 1)
        _axes(fig, src_labels, tgt_labels, 1, h + 1, first=h == 0)
    fig.update_layout(title=title, height=430, font=FONT, margin=dict(t=90, b=60, l=90, r=20))
    return fig


def head_heatmap(pattern: np.ndarray, src_labels: list[str], tgt_labels: list[str], title: str) -> go.Figure:
    """One head's (T, S) cross-attention, larger, with the weights written in the cells."""
    fig = go.Figure(_heatmap(pattern, src_labels, tgt_labels, show_scale=True))
    fig.data[0].update(text=np.round(pattern, 2), texttemplate="%{text:.2f}", textfont=dict(size=11))
    fig.update_layout(title=title, height=470, font=FONT, margin=dict(t=70, b=60, l=90, r=20))
    fig.update_xaxes(tickvals=list(range(len(src_labels))), ticktext=src_labels, title_text="source (keys)")
    fig.update_yaxes(
        tickvals=list(range(len(tgt_labels))), ticktext=tgt_labels, autorange="reversed", title_text="output (queries)"
    )
    return fig
