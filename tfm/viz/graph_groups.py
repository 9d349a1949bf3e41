"""Marks on the attribution graph figure (tfm.viz.graph): supernodes (nodes a reader grouped by
hand, each drawn as one coloured box with its name) and the node the reader opened.

Boxes are layout shapes and names annotations, not traces, so the figure's traces (and the
curve numbers a click reports) stay those of `graph_figure`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..analysis.graph.files import GraphFile
from .attention import plotly_text
from .graph import node_xy

GROUP_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PAD_X, PAD_Y = 0.18, 0.35


def add_supernodes(fig: go.Figure, gf: GraphFile, groups: dict[str, list[int]]) -> go.Figure:
    """One translucent box around each group's nodes (those drawn in `gf`), named above it."""
    xy = node_xy(gf)
    for j, (name, nodes) in enumerate(groups.items()):
        points = [xy[n] for n in nodes if n in xy]
        if not points:
            continue
        colour = GROUP_COLOURS[j % len(GROUP_COLOURS)]
        x0, x1 = min(p[0] for p in points) - PAD_X, max(p[0] for p in points) + PAD_X
        y0, y1 = min(p[1] for p in points) - PAD_Y, max(p[1] for p in points) + PAD_Y
        fig.add_shape(
            type="rect",
            x0=x0,
            x1=x1,
            y0=y0,
            y1=y1,
            line=dict(color=colour, width=2),
            fillcolor=colour,
            opacity=0.18,
            layer="below",
        )
        fig.add_annotation(
            x=(x0 + x1) / 2,
            y=y1,
            text=f"<b>{plotly_text(name)}</b>",
            showarrow=False,
            yanchor="bottom",
            font=dict(color=colour, size=12),
        )
    return fig


def mark_node(fig: go.Figure, gf: GraphFile, node: int | None) -> go.Figure:
    """A ring around the opened node (when it is drawn)."""
    xy = node_xy(gf)
    if node is not None and node in xy:
        x, y = xy[node]
        fig.add_shape(
            type="circle",
            x0=x - 0.12,
            x1=x + 0.12,
            y0=y - 0.3,
            y1=y + 0.3,
            line=dict(color="#000", width=2, dash="dot"),
        )
    return fig
