"""The attribution-graph page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class GraphView(PageView):
    """The token explained (a `tfm.analysis.graph.build.Target`) and the shares of influence kept (none in the link)."""

    target: object
    node_threshold: float
    edge_threshold: float
