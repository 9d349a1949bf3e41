"""Figures from plain dicts, without plotly's per-property validation: it cost more than the rest
of a page run for an attention heatmap and half of building the next-token chart
(docs/benchmarks.md). The tests validate every such figure instead and check that the browser gets
what the validated twin would send (tests/app/test_attention.py, tests/test_viz_plain.py)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import get_colorscale


def figure(data: list[dict], layout: dict) -> go.Figure:
    """`go.Figure(data=data, layout=layout)`, unvalidated: `data` holds one dict per trace
    (with its "type"), `layout` the layout's properties. A colorscale given by name is
    expanded here as validation would: plotly.js reads some names (Blues) the other way round."""
    for trace in data:
        for holder in (trace, trace.get("marker") or {}):
            if isinstance(holder.get("colorscale"), str):
                holder["colorscale"] = get_colorscale(holder["colorscale"])
    return go.Figure({"data": data, "layout": layout}, _validate=False)
