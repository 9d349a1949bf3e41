"""Figures for the "Why this token?" page: pure functions of the engine's numbers and labels.

Contributions are in logit units (positive = pushes toward the explained token). Diverging
colours are centred on 0 so a sign is always visible; hover shows the exact value. The page's
charts are built as plain dicts, unvalidated (`tfm.viz.figure_dicts`: validation was ~3/4 of a Why page
run's own CPU); tests/test_viz_plain.py validates them.
"""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go

from ..core.trace_names import head_label
from .attention import plotly_text
from .figure_dicts import figure

DIVERGING = "RdBu"
POS_COLOUR, NEG_COLOUR, ABL_COLOUR = "#2166ac", "#b2182b", "#ff7f0e"


def pretty(name: str) -> str:
    """A component's short label: L3 H5 for head 5 of block 3, L3 MLP; embed, pos_embed, bias as they are."""
    parts = name.split(".")
    if parts[0] == "blocks":
        return head_label(parts[1], parts[-1]) if "head" in parts else f"L{parts[1]} MLP"
    return name


def _title(text: str) -> dict:
    return dict(title=dict(text=text))


def contrib_bars(
    names: list[str], values: np.ndarray, title: str, effects: np.ndarray | None = None, top: int = 15
) -> go.Figure:
    """The `top` components by |direct attribution|, largest at the top; with `effects`, each
    one's measured change of the same logit (difference) when it is ablated, beside it."""
    order = np.argsort(-np.abs(values))[:top][::-1]
    labels = [pretty(names[i]) for i in order]
    vals = values[order]
    traces = [
        dict(
            type="bar",
            x=vals,
            y=labels,
            orientation="h",
            name="direct attribution",
            marker=dict(color=[POS_COLOUR if v >= 0 else NEG_COLOUR for v in vals]),
            hovertemplate="%{y}: %{x:.4f} logits (direct attribution)<extra></extra>",
        )
    ]
    if effects is not None:
        traces.append(_ablation_bars(effects[order], labels))
    return figure(
        traces,
        dict(
            _title(title),
            xaxis=_title("logits toward the token"),
            yaxis=_title("component"),
            barmode="group",
            height=max(320, 26 * len(labels) + 140),
            legend=dict(orientation="h"),
        ),
    )


def _ablation_bars(eff: np.ndarray, labels: list[str]) -> dict:
    """Each component's measured change of the logit when zero-ablated, negated beside its bar."""
    return dict(
        type="bar",
        x=-eff,
        y=labels,
        orientation="h",
        name="− change when zero-ablated",
        marker=dict(color=ABL_COLOUR),
        customdata=eff,
        hovertemplate="%{y}: ablating it changes the logit by %{customdata:.4f}<extra></extra>",
    )


def _heatmap(
    z: np.ndarray, x: list[str], y: list[str], title: str, x_title: str, y_title: str, colour_title: str
) -> tuple[dict, dict]:
    """(trace, layout) of `heatmap`."""
    lim = float(np.nanmax(np.abs(z))) if np.size(z) and np.isfinite(z).any() else 1.0
    trace = dict(
        type="heatmap",
        z=z,
        x=[plotly_text(s) for s in x],
        y=[plotly_text(s) for s in y],
        colorscale=DIVERGING,
        zmid=0,
        zmin=-lim or -1,
        zmax=lim or 1,
        colorbar=_title(colour_title),
        hovertemplate=f"{y_title} %{{y}}, {x_title} %{{x}}: %{{z:.4f}}<extra></extra>",
    )
    layout = dict(
        _title(title),
        xaxis=_title(x_title),
        yaxis=dict(_title(y_title), autorange="reversed"),
        height=max(300, 34 * len(y) + 160),
    )
    return trace, layout


def heatmap(
    z: np.ndarray, x: list[str], y: list[str], title: str, x_title: str, y_title: str, colour_title: str = "logits"
) -> go.Figure:
    """A diverging heatmap centred on 0 with the exact value on hover."""
    trace, layout = _heatmap(z, x, y, title, x_title, y_title, colour_title)
    return figure([trace], layout)


def head_heatmap(values: np.ndarray, title: str, colour_title: str = "logits", clickable: bool = False) -> go.Figure:
    """(L, H) -> layers x heads. `clickable` lays a nearly transparent square marker on every
    cell: Streamlit's selection reports clicks on scatter points, not on heatmap cells."""
    n_layer, n_head = values.shape
    x, y = [f"H{h}" for h in range(n_head)], [f"L{l}" for l in range(n_layer)]
    trace, layout = _heatmap(values, x, y, title, "head", "layer", colour_title)
    traces = [trace]
    if clickable:
        gx, gy = np.meshgrid(np.arange(n_head), np.arange(n_layer))
        traces.append(
            dict(
                type="scatter",
                x=[x[i] for i in gx.ravel()],
                y=[y[i] for i in gy.ravel()],
                customdata=values.ravel(),
                mode="markers",
                showlegend=False,
                marker=dict(symbol="square", size=28, opacity=0.01, color="#000"),
                hovertemplate="%{y} %{x}: %{customdata:.4f} (click to open)<extra></extra>",
            )
        )
    return figure(traces, layout)


def source_bars(values: np.ndarray, labels: list[str], title: str) -> go.Figure:
    trace = dict(
        type="bar",
        x=[plotly_text(s) for s in labels],
        y=values,
        marker=dict(color=[POS_COLOUR if v >= 0 else NEG_COLOUR for v in values]),
        hovertemplate="source %{x}: %{y:.4f} logits<extra></extra>",
    )
    return figure(
        [trace],
        dict(
            _title(title),
            xaxis=_title("source position (token the head read from)"),
            yaxis=_title("logits toward the token"),
            height=360,
        ),
    )


def dist_compare(pieces: list[str], before: np.ndarray, after: np.ndarray, title: str) -> go.Figure:
    """Probabilities of the same tokens before and after an intervention, side by side."""
    x = [plotly_text(p) for p in pieces]
    fig = go.Figure(
        [
            go.Bar(
                x=x,
                y=before,
                name="before",
                marker_color=POS_COLOUR,
                hovertemplate="%{x}: %{y:.4f} before<extra></extra>",
            ),
            go.Bar(
                x=x, y=after, name="after", marker_color=ABL_COLOUR, hovertemplate="%{x}: %{y:.4f} after<extra></extra>"
            ),
        ]
    )
    fig.update_layout(
        title=title,
        barmode="group",
        xaxis_title="next token",
        yaxis_title="probability",
        height=380,
        legend_orientation="h",
    )
    return fig


def estimate_vs_reality(names: list[str], attributed: np.ndarray, effects: np.ndarray, title: str) -> go.Figure:
    """Each head / MLP: direct attribution (x) against minus the change of the logit when it is
    ablated (y). On the diagonal the two agree; off it the component acts indirectly."""
    lim = float(max(np.abs(attributed).max(initial=0), np.abs(effects).max(initial=0), 1e-6))
    fig = go.Figure(
        [
            go.Scatter(
                x=[-lim, lim],
                y=[-lim, lim],
                mode="lines",
                line=dict(dash="dot", color="#999"),
                name="agree",
                hoverinfo="skip",
            ),
            go.Scatter(
                x=attributed,
                y=-effects,
                mode="markers",
                name="components",
                text=[pretty(n) for n in names],
                marker=dict(size=9, color=ABL_COLOUR),
                hovertemplate="%{text}: attribution %{x:.4f}, ablation effect %{y:.4f}<extra></extra>",
            ),
        ]
    )
    fig.update_layout(
        title=title,
        xaxis_title="direct attribution (logits)",
        yaxis_title="logit lost when zero-ablated",
        height=460,
        legend_orientation="h",
    )
    return fig


def flow_graph(flow: np.ndarray, labels: list[str], threshold: float, title: str) -> go.Figure:
    """Nodes: the stream at each position (y) before each layer (x). Edges: head-moved
    information from source s (layer l) to destination t (layer l + 1), drawn when its weight
    is at least `threshold` x the largest; width and opacity grow with the weight."""
    n_layer, w, _ = flow.shape
    top = float(flow.max()) if flow.size else 0.0
    fig = go.Figure()
    for lo, hi, alpha in ((0.0, 0.25, 0.25), (0.25, 0.5, 0.45), (0.5, 0.75, 0.7), (0.75, 1.01, 0.95)):
        xs, ys = _edges(flow, max(threshold, lo) * top, hi * top, top > 0)
        fig.add_scatter(
            x=xs,
            y=ys,
            mode="lines",
            line=dict(width=1 + 5 * lo, color=f"rgba(33,102,172,{alpha})"),
            name=f"{lo:.0%}–{min(hi, 1):.0%} of max",
            hoverinfo="skip",
        )
    nx, ny = np.meshgrid(np.arange(n_layer + 1), np.arange(w))
    fig.add_scatter(
        x=nx.ravel(),
        y=ny.ravel(),
        mode="markers",
        marker=dict(size=6, color="#444"),
        name="stream",
        text=[plotly_text(labels[i]) for i in ny.ravel()],
        hovertemplate="before layer %{x}, position %{text}<extra></extra>",
    )
    fig.update_layout(
        title=title,
        xaxis=dict(title="layer boundary (0 = embeddings)", dtick=1),
        yaxis=dict(
            title="position", tickvals=list(range(w)), ticktext=[plotly_text(s) for s in labels], autorange="reversed"
        ),
        height=max(360, 22 * w + 160),
        legend_orientation="h",
    )
    return fig


def _edges(flow: np.ndarray, lo: float, hi: float, any_flow: bool) -> tuple[list, list]:
    """Line coordinates (None between segments) of the edges with lo <= weight < hi, skipping a
    position's flow to itself."""
    xs, ys = [], []
    for l, t, s in zip(*np.nonzero((flow >= lo) & (flow < hi) & any_flow)):
        if s != t:
            xs += [l, l + 1, None]
            ys += [s, t, None]
    return xs, ys


def export_json(numbers: dict) -> bytes:
    return json.dumps(numbers, indent=1, ensure_ascii=False).encode()
