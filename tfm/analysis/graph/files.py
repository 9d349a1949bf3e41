"""A pruned attribution graph as a file: nodes, edges, scores, the model and the transcoder set.

    gf = graph_file(prune_graph(g), token_labels(lm.tokenizer, g.ids), lm.config, ts)
    text = gf.to_json()
    same = load_graph_json(text)         # validated: one ValueError naming what is wrong

Node ids are the full graph's node indices (`Graph.node`), so a file's nodes can be matched with a
rebuilt graph. What a figure draws (`tfm.viz.graph`) comes from a `GraphFile`, built or loaded.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Literal, get_args

from ...core import cancel
from ...core.config import ModelConfig
from ...core.files import parse_json
from ...core.escape import short
from ...core.validate import check_int, check_number, from_json_object
from .build import Target
from .prune import MAX_EDGES as VIEW_EDGES, Pruned

FORMAT, VERSION = "tfm-attribution-graph", 1
MAX_NODES, MAX_EDGES = 50_000, 500_000  # a view keeps at most VIEW_EDGES + one edge per node: it reads back
assert VIEW_EDGES + MAX_NODES <= MAX_EDGES
MAX_TEXT = 4 * 2**20 + 200 * MAX_EDGES  # characters of a file read back
NodeKind = Literal["feature", "error", "sink", "token", "position", "target"]


@dataclass(frozen=True)
class GraphNode:
    id: int
    kind: NodeKind
    layer: int  # -1 for tokens and positions, n_layer for the target
    pos: int
    influence: float
    feature: int | None = None
    activation: float | None = None
    token: int | None = None
    slope: float | None = None  # d target / d activation in the real model (graph_slopes; features only)

    def __post_init__(self) -> None:
        if self.kind not in get_args(NodeKind):
            raise ValueError(f"node kind {short(str(self.kind), 40)!r}: one of {', '.join(get_args(NodeKind))}")
        check_int("node id", self.id, 0, 2**31)
        check_int("node layer", self.layer, -1, 1000)
        check_int("node pos", self.pos, 0, 2**20)
        check_number("node influence", self.influence)
        if (self.kind == "feature") != (self.feature is not None and self.activation is not None):
            raise ValueError("feature nodes (and only they) carry a feature id and an activation")
        if self.feature is not None:
            check_int("feature", self.feature, 0, 2**20)
            check_number("activation", self.activation)
        if self.slope is not None:
            if self.kind != "feature":
                raise ValueError("only feature nodes carry a slope")
            check_number("slope", self.slope)


@dataclass(frozen=True)
class GraphEdge:
    source: int
    target: int
    weight: float

    def __post_init__(self) -> None:
        check_int("edge source", self.source, 0, 2**31)
        check_int("edge target", self.target, 0, 2**31)
        check_number("edge weight", self.weight)


@dataclass(frozen=True, eq=False)
class GraphFile:
    spec: str
    model: dict  # the model's config (ModelConfig.to_dict)
    transcoders: dict  # {"identity": ..., "config": ...}
    ids: tuple[int, ...]
    labels: tuple[str, ...]
    target: Target
    logit: float
    prob: float
    scores: dict  # replacement, completeness, node_share, edge_share, node/edge threshold
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "spec": self.spec,
            "model": self.model,
            "transcoders": self.transcoders,
            "ids": list(self.ids),
            "labels": list(self.labels),
            "target": self.target.to_dict(),
            "logit": self.logit,
            "prob": self.prob,
            "scores": self.scores,
            "nodes": [{k: v for k, v in asdict(n).items() if v is not None} for n in self.nodes],
            "edges": [[e.source, e.target, e.weight] for e in self.edges],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @cached_property
    def nbytes(self) -> int:
        """Python bytes of its nodes and edges, an upper bound (what a cache holding it pays: a graph
        pruned at 1.0 / 1.0 keeps every edge, ~10^5 small objects). Edges all have the same form,
        so one edge is measured and counted len(edges) times; shared small ints and dict keys are
        counted in each object, so this over-counts (tests/test_graph.py bounds by how much)."""
        edges = _object_bytes(self.edges[0]) * len(self.edges) if self.edges else 0
        return sum(_object_bytes(n) for n in self.nodes) + edges + sys.getsizeof(self.nodes) + sys.getsizeof(self.edges)


def _object_bytes(obj) -> int:
    """One small dataclass instance: itself, its attribute dict and its values."""
    return sys.getsizeof(obj) + sys.getsizeof(obj.__dict__) + sum(sys.getsizeof(v) for v in obj.__dict__.values())


def graph_file(
    pruned: Pruned, labels, model_config: ModelConfig, transcoders, should_stop: cancel.ShouldStop = None
) -> GraphFile:
    """The kept nodes and edges of `pruned` with everything a reader needs to know what they are
    (`should_stop` is asked every few thousand objects: raises tfm.core.cancel.Cancelled)."""
    g = pruned.graph
    if len(labels) != g.n_pos:
        raise ValueError(f"{len(labels)} labels for a graph of {g.n_pos} tokens")
    kept = pruned.nodes.nonzero().squeeze(1).tolist()
    if len(kept) > MAX_NODES:
        raise ValueError(
            f"the view keeps {len(kept):,} nodes; a graph file holds at most {MAX_NODES:,}: raise the thresholds less"
        )
    nodes, edges = _file_nodes(pruned, kept, should_stop), _file_edges(pruned, should_stop)
    scores = {
        "replacement": pruned.replacement,
        "completeness": pruned.completeness,
        "node_share": pruned.node_share,
        "edge_share": pruned.edge_share,
        "node_threshold": pruned.node_threshold,
        "edge_threshold": pruned.edge_threshold,
    }
    return GraphFile(
        g.spec,
        model_config.to_dict(),
        {"identity": transcoders.identity, "config": transcoders.cfg.to_dict()},
        g.ids,
        tuple(str(s) for s in labels),
        g.target,
        g.logit,
        g.prob,
        scores,
        tuple(nodes),
        edges,
    )


def _file_nodes(pruned: Pruned, kept: list[int], should_stop: cancel.ShouldStop) -> list[GraphNode]:
    """The kept nodes as the file writes them (`should_stop` asked every 4,096)."""
    nodes = []
    for j, i in enumerate(kept):
        if j % 4096 == 0:
            cancel.check(should_stop, "writing the graph file")
        info = pruned.graph.node(i)
        nodes.append(
            GraphNode(
                i,
                info["kind"],
                info["layer"],
                info["pos"],
                float(pruned.influence[i]),
                info.get("feature"),
                info.get("activation"),
                info.get("token"),
                info.get("slope"),
            )
        )
    return nodes


def _file_edges(pruned: Pruned, should_stop: cancel.ShouldStop) -> tuple[GraphEdge, ...]:
    """The kept edges as the file writes them (`should_stop` asked every 16,384)."""
    edges = []
    for j, (s, t, w) in enumerate(pruned.kept_edges()):
        if j % 16384 == 0:
            cancel.check(should_stop, "writing the graph file")
        edges.append(GraphEdge(s, t, w))
    return tuple(edges)


def _need(data: dict, key: str, kind, what: str = "the graph file"):
    if key not in data or not isinstance(data[key], kind) or isinstance(data[key], bool) and kind is not bool:
        raise ValueError(f"{what} needs {key!r} as {getattr(kind, '__name__', kind)}")
    return data[key]


def load_graph_json(text: str | bytes, name: str = "the graph file") -> GraphFile:
    """A graph file read back and validated (sizes, kinds, ranges, edges between listed nodes)."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"{name} is {len(text):,} characters, over the {MAX_TEXT:,} a graph file may have")
    data = parse_json(text, name)
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or type(data.get("version")) is not int
        or data["version"] != VERSION
    ):
        raise ValueError(f"{name} is not a tfm attribution graph (format {FORMAT!r}, version {VERSION})")
    model = ModelConfig.from_dict(_need(data, "model", dict))
    ids = tuple(check_int("token id", i, 0, model.vocab_size - 1) for i in _need(data, "ids", list))
    labels = _need(data, "labels", list)
    if len(labels) != len(ids) or not all(isinstance(s, str) and len(s) <= 200 for s in labels):
        raise ValueError(f"{name}: one short text label per token id")
    nodes, edges = _read_nodes_and_edges(data, name, len(ids), model.n_layer)
    scores = _need(data, "scores", dict)
    for key in ("replacement", "completeness", "node_share", "edge_share", "node_threshold", "edge_threshold"):
        check_number(f"score {key}", scores.get(key))
    tc = _read_transcoders(data, name)
    spec = _need(data, "spec", str)
    logit, prob = (check_number(k, data.get(k)) for k in ("logit", "prob"))
    return GraphFile(
        spec[:500],
        model.to_dict(),
        tc,
        ids,
        tuple(labels),
        _target(data, model),
        logit,
        prob,
        {k: float(scores[k]) for k in scores if isinstance(scores[k], (int, float)) and math.isfinite(scores[k])},
        nodes,
        tuple(edges),
    )


def _read_transcoders(data: dict, name: str) -> dict:
    tc = _need(data, "transcoders", dict)
    if not isinstance(tc.get("identity"), str) or not isinstance(tc.get("config"), dict):
        raise ValueError(f"{name}: transcoders needs an identity (text) and a config (object)")
    return tc


def _read_nodes_and_edges(data: dict, name: str, n_pos: int, n_layer: int) -> tuple[tuple, list]:
    """The file's nodes (unique ids, positions within the prompt, layers within the model) and its
    edges (each between two listed nodes), within the counts a graph file may have."""
    raw_nodes, raw_edges = _need(data, "nodes", list), _need(data, "edges", list)
    if len(raw_nodes) > MAX_NODES or len(raw_edges) > MAX_EDGES:
        raise ValueError(
            f"{name} has {len(raw_nodes):,} nodes and {len(raw_edges):,} edges; at most {MAX_NODES:,} and {MAX_EDGES:,}"
        )
    nodes = tuple(from_json_object(GraphNode, n, "a graph node") for n in raw_nodes)
    known = {n.id for n in nodes}
    if len(known) != len(nodes) or any(n.pos >= n_pos or n.layer > n_layer for n in nodes):
        raise ValueError(f"{name}: node ids must be unique, positions within the prompt, layers within the model")
    edges = []
    for e in raw_edges:
        if not isinstance(e, list) or len(e) != 3:
            raise ValueError(f"{name}: each edge is [source, target, weight]")
        edges.append(GraphEdge(*e))
        if e[0] not in known or e[1] not in known:
            raise ValueError(f"{name}: edge {e[:2]} joins a node the file does not list")
    return nodes, edges


def _target(data: dict, model: ModelConfig) -> Target:
    target = Target.from_dict(_need(data, "target", dict))
    for t in (target.token, target.versus):
        if t is not None:
            check_int("target token", t, 0, model.vocab_size - 1, " (an id in the model's vocabulary)")
    return target
