"""Influence, pruning and the two scores of an attribution graph (the definitions of Ameisen et al.
2025 and circuit-tracer).

With A[target, source] the edges and each row normalised by its absolute sum (Â), a node's
influence on the target is the target's row of Â + Â² + ... : every path's product of normalised
weights, summed (the graph is acyclic, so the series ends after L + 1 terms).

Pruning keeps the nodes with the most influence until they hold `node_threshold` of all of it
(tokens, positions and the target always stay; a node of zero influence is never kept for it, so
a threshold of 1.0 keeps exactly the nodes with some influence), then scores each edge between
kept nodes by its normalised weight times its target node's influence (+1 for the target) in
that smaller graph and keeps the strongest until they hold `edge_threshold`, at most `max_edges`
of them (a view says when it was cut: `capped`). So that no kept node hangs loose, each keeps its
strongest edge into a kept node as well (only adds: the shares stay at least the thresholds).

Memory: the graph's (rows, nodes) matrix is read a block of rows at a time, so pruning holds a
block, the `max_edges` best candidates and per-node vectors, never a second matrix of the graph's
size (a graph at 1.0 / 1.0 has ~10^7 edges: tens of bytes each as Python objects).

Scores (of the whole graph, before pruning):
  replacement  = influence of tokens and positions / (that + influence of errors): how much of
                 what reaches the target from the prompt goes through features only;
  completeness = sum over nodes of (1 - the error share of its normalised inputs) x (its influence
                 + 1 for the target), over the sum of the weights: partial credit per node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...core import cancel
from ...core.validate import check_int, check_number
from .build import Graph

MAX_EDGES = 100_000  # the most edges a pruned view keeps (a file of them is ~4 MB; graph_io reads it)
BLOCK = 2**21  # entries of the edge matrix read at once (float64: 16 MB)
Progress = Callable[[float, str], None] | None


def normalised(rows: torch.Tensor) -> torch.Tensor:
    a = rows.double().abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def _spans(g: Graph) -> list[slice]:
    n_rows, n_cols = g.edges.shape
    step = max(1, BLOCK // max(n_cols, 1))
    return [slice(s, min(s + step, n_rows)) for s in range(0, n_rows, step)]


def _block(g: Graph, span: slice, row_mask=None, col_mask=None) -> torch.Tensor:
    """|edges| of a block of rows in float64, masked."""
    a = g.edges[span].to(torch.float64, copy=True).abs_()  # a copy: never the graph's own rows
    if row_mask is not None:
        a *= row_mask[span, None]
    if col_mask is not None:
        a *= col_mask[None, :]
    return a


def _blocks(g: Graph, row_mask: torch.Tensor | None = None, col_mask: torch.Tensor | None = None):
    """(first row, |edges| of a block of rows): the matrix a block at a time."""
    for span in _spans(g):
        yield span.start, _block(g, span, row_mask, col_mask)


def _row_sums(g: Graph, row_mask=None, col_mask=None) -> torch.Tensor:
    return torch.cat([a.sum(1) for _, a in _blocks(g, row_mask, col_mask)]).clamp(min=1e-10)


def node_influence(
    g: Graph,
    row_mask: torch.Tensor | None = None,
    col_mask: torch.Tensor | None = None,
    should_stop: cancel.ShouldStop = None,
) -> torch.Tensor:
    """(n_nodes,) each node's influence on the target (the target itself: 0), in the graph or in its
    part between kept rows (`row_mask`, over `Graph.edges`' rows) and kept columns (`col_mask`)."""
    sums = _row_sums(g, row_mask, col_mask)
    cols = g.row_nodes()
    cur = torch.zeros(g.edges.shape[0], dtype=torch.float64)
    cur[-1] = 1.0
    total = torch.zeros(g.n_nodes, dtype=torch.float64)
    for _ in range(g.n_layer + 2):
        w, step = cur / sums, torch.zeros(g.n_nodes, dtype=torch.float64)
        for span in _spans(g):
            cancel.check(should_stop, "pruning the graph")
            if bool(w[span].any()):
                step += w[span] @ _block(g, span, row_mask, col_mask)
        total += step
        cur = step[cols]
        cur[-1] = 0.0
        if not bool(cur.any()):
            break
    return total


def threshold(scores: torch.Tensor, share: float) -> float:
    """The smallest score among the largest ones that together hold `share` of the sum; with
    `share` 1 the smallest positive one (a running sum may reach the whole in floats before its
    last term, or never: which, differs from run to run). inf when no score is positive."""
    s = torch.sort(scores.flatten().double(), descending=True).values
    s = s[s > 0]
    if not s.numel():
        return float("inf")
    if share >= 1:
        return float(s[-1])
    i = int(torch.searchsorted(torch.cumsum(s, 0) / s.sum(), torch.tensor(share, dtype=torch.float64)))
    return float(s[min(i, s.numel() - 1)])


@dataclass(frozen=True, eq=False)
class Pruned:
    """A pruned view of a graph: a mask over its nodes and the kept edges as indices into its edge
    rows and nodes (strongest score first), with the shares kept and the whole graph's scores."""

    graph: Graph
    node_threshold: float
    edge_threshold: float
    influence: torch.Tensor  # (n_nodes,) on the whole graph
    nodes: torch.Tensor  # (n_nodes,) bool
    edge_index: torch.Tensor  # (2, K) long: row of graph.edges, source node
    node_share: float  # share of all influence held by kept nodes
    edge_share: float  # share of all edge scores (among kept nodes) held by kept edges
    replacement: float
    completeness: float
    n_candidates: int  # non-zero edges between kept nodes
    capped: bool  # True when `max_edges` cut the edges the threshold would keep

    @property
    def n_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes it holds beside its graph (which is cached on its own)."""
        return sum(t.numel() * t.element_size() for t in (self.influence, self.nodes, self.edge_index))

    @property
    def edges(self) -> torch.Tensor:
        """(n_f + 1, n_nodes) bool over graph.edges: the kept edges as a dense mask (made on each call)."""
        mask = torch.zeros(self.graph.edges.shape, dtype=torch.bool)
        mask[self.edge_index[0], self.edge_index[1]] = True
        return mask

    def kept_edges(self) -> list[tuple[int, int, float]]:
        """(source node, target node, weight) of every kept edge, strongest first."""
        r, c = self.edge_index
        w = self.graph.edges[r, c]
        order = torch.argsort(-w.abs(), stable=True)
        dst = self.graph.row_nodes()[r]
        return list(zip(c[order].tolist(), dst[order].tolist(), w[order].tolist()))


def graph_scores(g: Graph, inf: torch.Tensor | None = None) -> tuple[float, float]:
    """(replacement, completeness) of the whole graph."""
    inf = node_influence(g) if inf is None else inf
    err = float(inf[g.error_start : g.token_start].sum())
    tok = float(inf[g.token_start : g.target_index].sum())
    replacement = tok / (tok + err) if tok + err > 0 else 0.0
    weight = inf.clone()
    weight[g.target_index] += 1.0
    error_cols = torch.zeros(g.n_nodes, dtype=torch.float64)
    error_cols[g.error_start : g.token_start] = 1.0
    share = torch.cat([(a @ error_cols) / a.sum(1).clamp(min=1e-10) for _, a in _blocks(g)])
    non_error = torch.ones(g.n_nodes, dtype=torch.float64)
    non_error[g.row_nodes()] = 1 - share
    return replacement, float((non_error * weight).sum() / weight.sum())


def kept_nodes(g: Graph, inf: torch.Tensor, node_threshold: float) -> torch.Tensor:
    """(n_nodes,) bool: the nodes of positive influence holding `node_threshold` of it, and every
    token, position and the target."""
    nodes = (inf > 0) & (inf >= threshold(inf, node_threshold))
    nodes[g.token_start :] = True
    return nodes


def prune_graph(
    g: Graph,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    max_edges: int = MAX_EDGES,
    progress: Progress = None,
    should_stop: cancel.ShouldStop = None,
) -> Pruned:
    """The nodes holding `node_threshold` of the influence and the edges holding `edge_threshold`
    (at most `max_edges`, the strongest). `progress(fraction, text)` is told after each step;
    `should_stop` is asked between blocks of rows (raises tfm.core.cancel.Cancelled)."""
    check_number("node_threshold", node_threshold, 0.0, 1.0)
    check_number("edge_threshold", edge_threshold, 0.0, 1.0)
    check_int("max_edges", max_edges, 1, 10**7)
    say = progress or (lambda *_: None)
    inf, nodes, row_mask, col_mask, weight = _kept_nodes_and_weights(g, node_threshold, say, should_stop)
    say(0.7, "scoring the edges")
    index, kept_scores, total, n_candidates, capped = _kept_edges(
        g, nodes, row_mask, col_mask, weight, edge_threshold, max_edges, should_stop
    )
    say(0.9, "scores of the whole graph")
    replacement, completeness = graph_scores(g, inf)
    say(1.0, "")
    return Pruned(
        g,
        node_threshold,
        edge_threshold,
        inf,
        nodes,
        index,
        float(inf[nodes].sum() / inf.sum()) if inf.sum() > 0 else 1.0,
        kept_scores / total if total > 0 else 1.0,
        replacement,
        completeness,
        n_candidates,
        capped,
    )


def _kept_nodes_and_weights(g: Graph, node_threshold: float, say, should_stop):
    """Every node's influence, the nodes kept, the row and column masks they make, and each row's
    influence within the kept nodes (the target's row plus one)."""
    say(0.0, "influence of every node")
    inf = node_influence(g, should_stop=should_stop)
    nodes = kept_nodes(g, inf, node_threshold)
    rows = g.row_nodes()
    row_mask, col_mask = nodes[rows].double(), nodes.double()
    say(0.35, "influence within the kept nodes")
    weight = node_influence(g, row_mask, col_mask, should_stop)[rows]
    weight[-1] += 1.0
    return inf, nodes, row_mask, col_mask, weight


def _kept_edges(g: Graph, nodes, row_mask, col_mask, weight, edge_threshold: float, max_edges: int, should_stop):
    """The edges over `edge_threshold` of the score (at most `max_edges`; every kept node keeps one way
    out): their (rows, cols) index, the score they hold and the whole, how many were candidates, capped."""
    weight = weight / _row_sums(g, row_mask, col_mask)  # an edge's score: |weight| x this of its row
    best, total, n_candidates, col_best = _best_edges(g, row_mask, col_mask, weight, max_edges, should_stop)
    keep, capped = _over_threshold(best[0], total, edge_threshold, n_candidates)
    index = _keep_one_out(g, nodes, best[1:, keep], col_best)
    r, c = index
    kept_scores = float((g.edges[r, c].double().abs() * row_mask[r] * col_mask[c] * weight[r]).sum())
    return index, kept_scores, total, n_candidates, capped


def _best_edges(g: Graph, row_mask, col_mask, weight, k: int, should_stop):
    """The `k` best-scoring edges ((3, <=k) float64: score, row, column, best first; an edge's score
    is |its weight| x `weight` of its row), the sum of every score, how many edges score above 0,
    and each column's strongest |weight| and its row."""
    best = torch.zeros(3, 0, dtype=torch.float64)
    total, count = 0.0, 0
    col_max = torch.zeros(g.n_nodes, dtype=torch.float64)
    col_row = torch.zeros(g.n_nodes, dtype=torch.long)
    for s, a in _blocks(g, row_mask, col_mask):
        cancel.check(should_stop, "pruning the graph")
        m, r = a.max(0)
        better = m > col_max
        col_max[better], col_row[better] = m[better], r[better] + s
        score = a * weight[s : s + a.shape[0], None]
        total += float(score.sum())
        r, c = (score > 0).nonzero(as_tuple=True)
        count += int(r.numel())
        v = score[r, c]
        if best.shape[1] == k:  # only what beats the k-th best so far
            over = v > best[0, -1]
            r, c, v = r[over], c[over], v[over]
        pool = torch.cat([best, torch.stack([v, (r + s).double(), c.double()])], 1)
        top = torch.topk(pool[0], min(k, pool.shape[1]), sorted=True).indices
        best = pool[:, top]
    return best, total, count, (col_max, col_row)


def _over_threshold(scores: torch.Tensor, total: float, share: float, n_all: int) -> tuple[torch.Tensor, bool]:
    """Which of the best `scores` (descending, of `n_all` positive ones) hold `share` of `total`;
    capped when they are not enough and more were left out."""
    if not scores.numel() or total <= 0:
        return torch.zeros(scores.numel(), dtype=torch.bool), False
    i = int(torch.searchsorted(torch.cumsum(scores, 0) / total, torch.tensor(share, dtype=torch.float64)))
    if share >= 1 or i >= scores.numel():
        return scores > 0, scores.numel() < n_all
    return scores >= scores[i], False


def _keep_one_out(g: Graph, nodes: torch.Tensor, index: torch.Tensor, col_best) -> torch.Tensor:
    """Each kept node (but the target) with no kept outgoing edge keeps its strongest one."""
    index = index.long()
    has_out = torch.zeros(g.n_nodes, dtype=torch.bool)
    has_out[index[1]] = True
    col_max, col_row = col_best
    loose = nodes & ~has_out & (col_max > 0)
    loose[g.target_index] = False
    cols = loose.nonzero().squeeze(1)
    return torch.cat([index, torch.stack([col_row[cols], cols])], 1)
