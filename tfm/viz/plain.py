"""Figures from plain dicts, without plotly's per-property validation: it cost 30-100 ms for an
attention heatmap and half of building the next-token chart (7.7 vs 3.9 ms), more than the rest
of a page run. The tests validate every such figure instead (`go.Figure(fig.to_dict())` raises
on any invalid property or value): tests/app/test_attention.py, tests/test_viz_plain.py."""
from __future__ import annotations

import plotly.graph_objects as go


def figure(data: list[dict], layout: dict) -> go.Figure:
    """`go.Figure(data=data, layout=layout)`, unvalidated: `data` holds one dict per trace
    (with its "type"), `layout` the layout's properties."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)
