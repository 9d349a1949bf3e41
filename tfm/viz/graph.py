"""The attribution graph figure: layers up, positions across, node size by influence, edge width by
weight (blue raises its target node, red lowers it). Drawn from a `tfm.analysis.graph.files.GraphFile`
(built from a pruned graph, or loaded from a file), so a page and a notebook draw the same thing.

Nodes of one (layer, position) cell are spread side by side within it; token embeddings sit on the
bottom row ("emb"), position embeddings beside them, the target at the top. At most `max_edges`
edges are drawn, the strongest; edges go in a few traces by width (a plotly line has one width).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np
import plotly.graph_objects as go

from ..analysis.graph.files import GraphFile, GraphNode
from .attention import plotly_text
from .why import NEG_COLOUR, POS_COLOUR

KIND_COLOUR = {
    "feature": "#ff7f0e",
    "error": "#7f7f7f",
    "sink": "#1f77b4",
    "token": "#2ca02c",
    "position": "#98df8a",
    "target": "#9467bd",
}
WIDTHS = (0.5, 1.2, 2.2, 3.5, 5.0)
DRAWN_EDGES = 400  # the most edges a figure draws (the strongest): a browser draws more slowly than we list


def node_xy(gf: GraphFile) -> dict[int, tuple[float, float]]:
    """Where each node is drawn: x = position (+ a spread within its cell), y = its row (layer + 1:
    embeddings on 0, the target on L + 1)."""
    cells = defaultdict(list)
    for n in gf.nodes:
        cells[(n.layer, n.pos)].append(n)
    xy = {}
    for (layer, pos), nodes in cells.items():
        nodes.sort(key=lambda n: (n.kind != "token", n.kind, -n.influence))
        width = min(0.8, 0.12 * (len(nodes) - 1))
        for j, n in enumerate(nodes):
            dx = 0.0 if len(nodes) == 1 else -width / 2 + width * j / (len(nodes) - 1)
            xy[n.id] = (pos + dx, layer + 1)
    return xy


def _hover(n: GraphNode, labels: tuple[str, ...]) -> str:
    token = plotly_text(labels[n.pos])
    if n.kind == "feature":
        head = f"feature {n.feature} · layer {n.layer}<br>activation {n.activation:.3f}"
    elif n.kind == "error":
        head = f"error (what the transcoder missed) · layer {n.layer}"
    elif n.kind == "sink":
        head = f"attention sink · layer {n.layer}: position 0's whole MLP output (features + error)"
    elif n.kind == "target":
        head = "target"
    else:
        head = f"{n.kind} embedding"
    return f"{head}<br>at {token}<br>influence {n.influence:.4f}"


def _edge_traces(gf: GraphFile, xy: dict, max_edges: int) -> list[go.Scatter]:
    edges = heapq.nsmallest(max_edges, gf.edges, key=lambda e: -abs(e.weight))  # stable, as sorted()[:n]
    if not edges:
        return []
    top = max(abs(e.weight) for e in edges)
    groups = defaultdict(lambda: ([], []))
    for e in edges:  # the share first: 5 x 1e308 overflows; every weight 0 draws the thinnest lines
        bucket = min(len(WIDTHS) - 1, int(len(WIDTHS) * (abs(e.weight) / top if top > 0 else 0.0)))
        xs, ys = groups[(e.weight >= 0, bucket)]
        (x0, y0), (x1, y1) = xy[e.source], xy[e.target]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return [
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            hoverinfo="skip",
            showlegend=False,
            line=dict(width=WIDTHS[b], color=POS_COLOUR if pos else NEG_COLOUR),
            opacity=0.55,
        )
        for (pos, b), (xs, ys) in sorted(groups.items())
    ]


def graph_figure(gf: GraphFile, max_edges: int = DRAWN_EDGES, target_label: str = "") -> go.Figure:
    """The pruned graph of `gf`; `target_label` names the explained token in the title."""
    xy = node_xy(gf)
    fig = go.Figure(_edge_traces(gf, xy, max_edges))
    top = max(max((n.influence for n in gf.nodes if n.kind != "target"), default=1.0), 0.0) or 1.0
    for kind, colour in KIND_COLOUR.items():
        nodes = [n for n in gf.nodes if n.kind == kind]
        if not nodes:
            continue
        size = [22.0 if kind == "target" else 6 + 22 * np.sqrt(min(max(n.influence, 0.0) / top, 1.0)) for n in nodes]
        fig.add_trace(
            go.Scatter(
                x=[xy[n.id][0] for n in nodes],
                y=[xy[n.id][1] for n in nodes],
                mode="markers",
                name=kind,
                marker=dict(size=size, color=colour, line=dict(width=0.5, color="#333")),
                text=[_hover(n, gf.labels) for n in nodes],
                hovertemplate="%{text}<extra></extra>",
                customdata=[n.id for n in nodes],
            )
        )
    fig.update_layout(**_graph_layout(gf, target_label))
    return fig


def _graph_layout(gf: GraphFile, target_label: str) -> dict:
    """The title with the graph's scores; positions across, layers (embedding to target) up."""
    n_layer = int(gf.model["n_layer"])
    scores = gf.scores
    return dict(
        title=f"Attribution graph{' of “' + plotly_text(target_label) + '”' if target_label else ''} · "
        f"replacement {scores.get('replacement', 0):.2f} · completeness {scores.get('completeness', 0):.2f}",
        xaxis=dict(
            tickmode="array",
            tickvals=list(range(len(gf.labels))),
            ticktext=[plotly_text(s) for s in gf.labels],
            title="position",
        ),
        yaxis=dict(
            tickmode="array",
            tickvals=list(range(n_layer + 2)),
            ticktext=["emb"] + [f"L{i}" for i in range(n_layer)] + ["target"],
            title="layer",
        ),
        height=max(480, min(1400, 64 * (n_layer + 2))),
        legend=dict(orientation="h", y=-0.15),
        hovermode="closest",
    )
