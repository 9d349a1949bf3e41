"""Figures for the Steer page: what a steering direction does to the vocabulary, and the
probability of a few words as the strength sweeps."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from .attention import plotly_text
from .why import NEG_COLOUR, POS_COLOUR


def read_out_bars(
    up: list[str], up_scores: list[float], down: list[str], down_scores: list[float], title: str
) -> go.Figure:
    """Tokens the direction promotes (blue, top) and suppresses (red), by their logit change
    per unit of strength through the final norm's gain and the unembedding."""
    labels = [f"− {plotly_text(repr(p))}" for p in down[::-1]] + [f"+ {plotly_text(repr(p))}" for p in up[::-1]]
    values = list(down_scores[::-1]) + list(up_scores[::-1])
    fig = go.Figure(
        go.Bar(
            x=values,
            y=labels,
            orientation="h",
            marker_color=[POS_COLOUR if v >= 0 else NEG_COLOUR for v in values],
            hovertemplate="%{y}: %{x:.4f} logits per unit strength<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="logit change per unit of strength<br>(through the final norm's gain)",
        yaxis_title="token",
        height=max(320, 24 * len(values) + 140),
        showlegend=False,
    )
    return fig


def read_out_figure(display_piece, r, title: str) -> go.Figure:
    """`read_out_bars` of a read-out (`r.up`, `r.down`: token ids; `r.up_scores`, `r.down_scores`),
    each token shown by `display_piece(id)`."""
    up, down = [display_piece(i) for i in r.up], [display_piece(i) for i in r.down]
    return read_out_bars(up, r.up_scores, down, r.down_scores, title)


def mood_sweep(
    strengths: Sequence[float], probs: Sequence[Sequence[float]], pieces: list[str], current: float, title: str
) -> go.Figure:
    """p(each word next) against the steering strength, one line per word (probs[k][i]: word k
    at strengths[i]), the current strength marked; a log axis, as the words differ by decades."""
    fig = go.Figure()
    for piece, row in zip(pieces, probs):
        name = plotly_text(repr(piece))
        fig.add_trace(
            go.Scatter(
                x=strengths,
                y=row,
                mode="lines+markers",
                name=name,
                hovertemplate=f"{name}: strength %{{x:.2f}}, p = %{{y:.2e}}<extra></extra>",
            )
        )
    fig.add_vline(x=current, line_dash="dash", line_color="grey", annotation_text="current")
    fig.update_layout(
        title=title,
        xaxis_title="steering strength (× the layer's typical stream length)",
        yaxis_title="p(word) next",
        yaxis_type="log",
        height=400,
        legend_title_text="word",
    )
    return fig
