"""Influence, pruning and the two scores of an attribution graph (the definitions of Ameisen et al.
2025 and circuit-tracer).

With A[target, source] the edges and each row normalised by its absolute sum (Â), a node's
influence on the target is the target's row of Â + Â² + ... : every path's product of normalised
weights, summed (the graph is acyclic, so the series ends after L + 1 terms).

Pruning keeps the nodes with the most influence until they hold `node_threshold` of all of it
(tokens, positions and the target always stay), then scores each edge between kept nodes by its
normalised weight times its target node's influence (+1 for the target) in that smaller graph and
keeps the strongest until they hold `edge_threshold`. So that no kept node hangs loose, each keeps
its strongest edge into a kept node as well (only adds: the shares stay at least the thresholds).

Scores (of the whole graph, before pruning):
  replacement  = influence of tokens and positions / (that + influence of errors): how much of
                 what reaches the target from the prompt goes through features only;
  completeness = sum over nodes of (1 - the error share of its normalised inputs) x (its influence
                 + 1 for the target), over the sum of the weights: partial credit per node.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.validate import check_number
from .graph import Graph
from .graph_rows import influence as _influence


def normalised(rows: torch.Tensor) -> torch.Tensor:
    a = rows.double().abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def node_influence(g: Graph, rows: torch.Tensor | None = None) -> torch.Tensor:
    """(n_nodes,) each node's influence on the target (the target itself: 0)."""
    rows = g.edges if rows is None else rows
    weights = torch.zeros(rows.shape[0], dtype=torch.float64)
    weights[-1] = 1.0
    cols = g.row_nodes()
    cols[-1] = -1
    return _influence(rows.double(), cols, weights, g.n_layer + 1)


def threshold(scores: torch.Tensor, share: float) -> float:
    """The smallest score among the largest ones that together hold `share` of the sum."""
    s = torch.sort(scores.flatten().double(), descending=True).values
    total = float(s.sum())
    if total <= 0:
        return float("inf")
    i = int(torch.searchsorted(torch.cumsum(s, 0) / total, torch.tensor(share, dtype=torch.float64)))
    return float(s[min(i, s.numel() - 1)])


@dataclass(frozen=True, eq=False)
class Pruned:
    """A pruned view of a graph: masks over its nodes and over its edge rows, with the shares
    kept and the whole graph's scores."""

    graph: Graph
    node_threshold: float
    edge_threshold: float
    influence: torch.Tensor      # (n_nodes,) on the whole graph
    nodes: torch.Tensor          # (n_nodes,) bool
    edges: torch.Tensor          # (n_f + 1, n_nodes) bool, over graph.edges
    node_share: float            # share of all influence held by kept nodes
    edge_share: float            # share of all edge scores (among kept nodes) held by kept edges
    replacement: float
    completeness: float

    def kept_edges(self) -> list[tuple[int, int, float]]:
        """(source node, target node, weight) of every kept edge, strongest first."""
        r, c = self.edges.nonzero(as_tuple=True)
        dst = self.graph.row_nodes()[r]
        w = self.graph.edges[r, c]
        order = torch.argsort(-w.abs())
        return [(int(c[i]), int(dst[i]), float(w[i])) for i in order]


def graph_scores(g: Graph, inf: torch.Tensor | None = None) -> tuple[float, float]:
    """(replacement, completeness) of the whole graph."""
    inf = node_influence(g) if inf is None else inf
    err = float(inf[g.error_start:g.token_start].sum())
    tok = float(inf[g.token_start:g.target_index].sum())
    replacement = tok / (tok + err) if tok + err > 0 else 0.0
    a = normalised(g.edges)
    weight = inf.clone()
    weight[g.target_index] += 1.0
    non_error = torch.ones(g.n_nodes, dtype=torch.float64)
    non_error[g.row_nodes()] = 1 - a[:, g.error_start:g.token_start].sum(1)
    return replacement, float((non_error * weight).sum() / weight.sum())


def prune_graph(g: Graph, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    """The nodes holding `node_threshold` of the influence and the edges holding `edge_threshold`."""
    check_number("node_threshold", node_threshold, 0.0, 1.0)
    check_number("edge_threshold", edge_threshold, 0.0, 1.0)
    inf = node_influence(g)
    nodes = inf >= threshold(inf, node_threshold)
    nodes[g.token_start:] = True
    rows = g.row_nodes()
    kept_rows = nodes[rows]
    sub = g.edges.double() * kept_rows[:, None] * nodes[None, :]
    sub_inf = node_influence(g, sub)
    weight = sub_inf[rows]
    weight[-1] += 1.0
    edge_scores = normalised(sub) * weight[:, None]
    edges = (edge_scores >= threshold(edge_scores, edge_threshold)) & (sub != 0)
    _keep_one_out(g, sub, nodes, edges)
    total_scores = float(edge_scores.sum())
    replacement, completeness = graph_scores(g, inf)
    return Pruned(g, node_threshold, edge_threshold, inf, nodes, edges,
                  float(inf[nodes].sum() / inf.sum()) if inf.sum() > 0 else 1.0,
                  float(edge_scores[edges].sum() / total_scores) if total_scores > 0 else 1.0,
                  replacement, completeness)


def _keep_one_out(g: Graph, sub: torch.Tensor, nodes: torch.Tensor, edges: torch.Tensor) -> None:
    """Each kept node (but the target) with no kept outgoing edge keeps its strongest one."""
    out_kept = edges.any(0)
    for j in (nodes & ~out_kept).nonzero().squeeze(1).tolist():
        if j == g.target_index:
            continue
        col = sub[:, j].abs()
        if col.max() > 0:
            edges[int(col.argmax()), j] = True
