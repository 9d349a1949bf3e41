"""Attribution graphs: which transcoder features made the model predict a token, and through what.

    ts = load_transcoders("assets/transcoders/default", lm)
    g = attribution_graph(lm, lm.tokenizer.prompt_ids("The capital of France is"), ts)
    p = prune_graph(g)                                # nodes holding 80% of the influence, edges 98%
    p.replacement, p.completeness                 # circuit-tracer's two scores
    intervene(lm, ids, ts, g.target, [FeatureEdit(3, 5, 120, 0.0)], graph=g)   # switch one off

On the frozen replacement model of the prompt (`frozen`: attention patterns and norm scales
held, each MLP replaced by its transcoder plus an error term) everything between feature
activations is linear, so each node's pre-activation (a feature's input to TopK, or the target
logit) is exactly the sum of its incoming edges plus a constant (`bias`: every bias of the model
and the transcoders). Nodes: active features (layer, position, feature), errors (layer,
position), token embeddings (and position embeddings when the model adds them) and the target.

The attention sink: real models park attention on position 0 (the first token, or BOS) and write
large, near-constant vectors there (SmolLM2's layer 11 writes a massive activation). Its features
say little about the prompt yet would take most kept nodes. With `GraphSettings.fold_sink` (the
default, on prompts of 2+ tokens) position 0's features are no feature nodes, as circuit-tracer
leaves BOS out as a source: what they write stays counted, in that layer's error at position 0,
which the graph names a "sink" node (`Graph.node`). The graph stays exact (edges + bias = each
node); the scores count sink nodes as error (conservative).
`Graph.edges` holds the rows of the nodes with inputs (features, then the target); the other nodes
are sources only. Pruning, scores: `prune`; interventions: `edit`; JSON: `files`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

from ...core import cancel
from ...core.config import JsonConfig
from ...core.validate import check_int
from . import frozen as graph_frozen, rows as graph_rows
from .slopes import real_slopes
from ..attribution import n_words
from .rows import Progress

TargetKind = Literal["top", "token", "difference"]
MAX_TOKENS = 2000  # the most any setting allows: graphs are for short prompts


@dataclass(frozen=True)
class Target(JsonConfig):
    """What the graph explains at the last position: the top token's logit ("top"), a chosen
    token's ("token"), or logit(token) - logit(versus) ("difference")."""

    _kind = "a graph target"

    kind: TargetKind = "top"
    token: int | None = None
    versus: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in get_args(TargetKind):
            raise ValueError(f"target kind {self.kind!r}: choose 'top', 'token' or 'difference'")
        for name in ("token", "versus"):
            if getattr(self, name) is not None:
                check_int(f"target {name}", getattr(self, name), 0, hint=" (a token id)")
        need = {"top": (False, False), "token": (True, False), "difference": (True, True)}[self.kind]
        if self.kind != "top" and (self.token is not None, self.versus is not None) != need:
            raise ValueError(f"a {self.kind!r} target needs " + ("token and versus" if need[1] else "token only"))
        if self.kind == "top" and self.versus is not None:
            raise ValueError("a 'top' target takes no versus token: use kind 'difference'")
        if self.kind == "difference" and self.token == self.versus:
            raise ValueError("token and versus are the same token: their logit difference is always 0")

    def resolve(self, logits: torch.Tensor, vocab: int) -> "Target":
        """This target with its token(s) checked against the model's `vocab` ids (the top one
        filled in for "top"): the target a graph records."""
        token = int(logits[:vocab].argmax()) if self.token is None else self.token
        for name, t in (("token", token), ("versus", self.versus)):
            if t is not None:
                check_int(f"target {name}", t, 0, vocab - 1, " (an id in the vocabulary)")
        return Target(self.kind, token, self.versus) if self.kind != "top" else Target("top", token, None)


@dataclass(frozen=True)
class GraphSettings(JsonConfig):
    """Bounds of one graph: prompt length; feature rows computed (the most influential first when
    a prompt has more): at most `max_feature_nodes`, and no more than `max_macs` multiply-adds of
    backward passes allow (a row costs ~ L/2 blocks x T/2 positions x D (D + Hkv hd): the bundled
    model gets every row of a short prompt, SmolLM2 ~1,900 at 16 tokens); active features kept as
    sources (the rest count as error); bytes of frozen patterns and errors; whether position 0 (the
    attention sink) is folded into "sink" nodes (see the module's docstring)."""

    _kind = "graph settings"

    max_tokens: int = 256
    max_feature_nodes: int = 8192
    max_macs: int = 10**11
    max_active: int = 65536
    max_bytes: int = 2**30
    fold_sink: bool = True

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, 1, MAX_TOKENS)
        check_int("max_feature_nodes", self.max_feature_nodes, 0, 2**17)
        check_int("max_macs", self.max_macs, 10**6, 10**15)
        check_int("max_active", self.max_active, 1, 2**20)
        check_int("max_bytes", self.max_bytes, 2**20, 2**36)
        if not isinstance(self.fold_sink, bool):
            raise ValueError(f"fold_sink is true or false, not {type(self.fold_sink).__name__}")

    def rows(self, cfg, n_tokens: int) -> int:
        """How many feature rows a graph of `n_tokens` on a model of `cfg` computes at most."""
        per_row = (
            max(cfg.n_layer // 2, 1) * max(n_tokens // 2, 1) * cfg.d_model * (cfg.d_model + cfg.n_kv_head * cfg.d_head)
        )
        return min(self.max_feature_nodes, max(64, self.max_macs // per_row))


@dataclass(frozen=True, eq=False)
class Graph:
    """One prompt's attribution graph. Node order: features (n_f), errors (L x T, layer-major),
    tokens (T), positions (T, when the model adds position vectors), the target (last)."""

    spec: str  # the model (tfm.loaders.spec text)
    transcoders: str  # the transcoder set's identity
    ids: tuple[int, ...]
    target: Target  # resolved: its token filled in
    logit: float  # the real model's target logit (difference)
    prob: float  # the real model's probability of target.token
    n_layer: int
    has_pos: bool
    features: torch.Tensor  # (n_f, 3) long: layer, position, feature id (sorted)
    activations: torch.Tensor  # (n_f,) float
    edges: torch.Tensor  # (n_f + 1, n_nodes): row i = feature i's inputs, last row the target's
    bias: torch.Tensor  # (n_f + 1,) the constant part of each row's pre-activation
    n_active: int  # active features in the prompt (some may be folded into errors)
    slopes: torch.Tensor  # (n_f,) float64 d target / d activation in the real model (graph_slopes)
    sink: bool = False  # position 0 folded: its error nodes hold its features too ("sink")

    @property
    def n_pos(self) -> int:
        return len(self.ids)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_nodes(self) -> int:
        return self.edges.shape[1]

    @property
    def error_start(self) -> int:
        return self.n_features

    @property
    def token_start(self) -> int:
        return self.n_features + self.n_layer * self.n_pos

    @property
    def target_index(self) -> int:
        return self.n_nodes - 1

    def row_nodes(self) -> torch.Tensor:
        """(n_f + 1,) the node index of each row of `edges`."""
        return torch.cat([torch.arange(self.n_features), torch.tensor([self.target_index])])

    def pre(self) -> torch.Tensor:
        """Each row node's pre-activation as the graph has it: its incoming edges plus its bias."""
        return self.edges.double().sum(1) + self.bias

    def adjacency(self) -> torch.Tensor:
        """The dense (n_nodes, n_nodes) matrix A[target, source] (rows of source-only nodes zero)."""
        if self.n_nodes**2 > 2**28:
            raise ValueError(f"{self.n_nodes:,} nodes make too large a dense matrix: read `edges` (its rows) instead")
        a = torch.zeros(self.n_nodes, self.n_nodes, dtype=self.edges.dtype)
        a[self.row_nodes()] = self.edges
        return a

    def node(self, i: int) -> dict:
        """What node i is: {"kind": feature|error|token|position|target, "layer", "pos", ...}."""
        t, nf = self.n_pos, self.n_features
        if i < nf:
            layer, pos, f = (int(v) for v in self.features[i])
            return {
                "kind": "feature",
                "layer": layer,
                "pos": pos,
                "feature": f,
                "activation": float(self.activations[i]),
                "slope": float(self.slopes[i]),
            }
        if i < self.token_start:
            layer, pos = divmod(i - nf, t)
            return {"kind": "sink" if self.sink and pos == 0 else "error", "layer": layer, "pos": pos}
        if i == self.target_index:
            return {"kind": "target", "layer": self.n_layer, "pos": t - 1}
        j = i - self.token_start
        return {"kind": "token" if j < t else "position", "layer": -1, "pos": j % t, "token": self.ids[j % t]}


def _check_prompt(model, ids, settings: GraphSettings) -> torch.Tensor:
    x = torch.as_tensor(ids, dtype=torch.long)
    if x.dim() != 1 or not x.numel():
        raise ValueError(f"an attribution graph reads one sequence of token ids (T,), got shape {tuple(x.shape)}")
    t = x.numel()
    if t > settings.max_tokens:
        raise ValueError(
            f"the prompt has {t:,} tokens; attribution graphs take at most {settings.max_tokens:,} "
            "(each costs a backward pass per active feature): shorten it"
        )
    cfg = model.config
    need = 4 * t * (t * cfg.n_layer * cfg.n_head + 2 * cfg.n_layer * cfg.d_model)
    if need > settings.max_bytes:
        raise ValueError(
            f"a graph of {t:,} tokens on this model holds ~{need / 2**20:,.0f} MB of frozen patterns and "
            f"errors, over the {settings.max_bytes / 2**20:,.0f} MB allowed: shorten the prompt"
        )
    return x


@torch.no_grad()
def _active(trace, transcoders, n_layer: int, max_active: int, skip_first: bool = False):
    """Every active feature (layer, pos, feature, act), sorted, at most `max_active` (the largest
    act x |W_dec row| kept; none at position 0 when `skip_first`), and each block's error: real
    mlp_out - decode(kept features). None active is refused: the graph would have no feature nodes."""
    found, errors = [], []
    for i in range(n_layer):
        tc = transcoders.layers[i]
        acts = tc.encode(trace[f"blocks.{i}.ln2.output"][0].float().cpu())  # (T, F)
        pos, feat = acts.nonzero(as_tuple=True)
        if skip_first:
            pos, feat = pos[pos > 0], feat[pos > 0]
        found.append((torch.full_like(pos, i), pos, feat, acts[pos, feat]))
    layer, pos, feat, act = (torch.cat(parts) for parts in zip(*found))
    if not act.numel():
        raise ValueError(
            "no feature of this transcoder set fires on this prompt, so the graph would have no "
            "feature nodes: check the set was trained for this model, or try another prompt"
        )
    if act.numel() > max_active:
        norms = torch.stack([tc.W_dec.norm(dim=1) for tc in transcoders.layers])  # (L, F)
        keep = (act * norms[layer, feat]).topk(max_active).indices
        layer, pos, feat, act = layer[keep], pos[keep], feat[keep], act[keep]
    order = torch.argsort((layer * 10**6 + pos) * 10**6 + feat)
    layer, pos, feat, act = layer[order], pos[order], feat[order], act[order]
    for i in range(n_layer):
        tc, sel = transcoders.layers[i], layer == i
        kept = torch.zeros(trace["embed"].shape[1], tc.cfg.n_features)
        kept[pos[sel], feat[sel]] = act[sel]
        errors.append(trace[f"blocks.{i}.mlp_out"][0].float().cpu() - tc.decode(kept))
    return layer, pos, feat, act, torch.stack(errors)


def _unembed_direction(model, target: Target, dtype) -> torch.Tensor:
    w_u = model.unembed.weight
    u = w_u[target.token].detach().to("cpu", dtype)
    return u - w_u[target.versus].detach().to("cpu", dtype) if target.kind == "difference" else u


@torch.no_grad()
def attribution_graph(
    lm,
    ids,
    transcoders,
    target: Target = Target(),
    settings: GraphSettings = GraphSettings(),
    progress: Progress = None,
    should_stop: cancel.ShouldStop = None,
    dtype: torch.dtype = torch.float32,
) -> Graph:
    """The attribution graph of `target` at the last position of `ids` (T,), with `transcoders`
    (a TranscoderSet of this model). `progress(fraction, text)` is told after each batch of rows;
    `should_stop` is asked between batches (raises tfm.core.cancel.Cancelled). The model is only
    read: one traced forward, then the frozen replacement model's passes."""
    model = lm.model if hasattr(lm, "model") else lm
    _check_transcoders(model, transcoders)
    x = _check_prompt(model, ids, settings)
    trace = model(x[None].to(next(model.parameters()).device), trace=True).trace
    logits = trace.logits_at(-1).double().cpu()
    target = target.resolve(logits, n_words(lm))
    fz = graph_frozen.freeze(model, trace, transcoders, dtype)
    sink = settings.fold_sink and x.numel() > 1
    layer, pos, feat, act, errors = _active(trace, transcoders, model.config.n_layer, settings.max_active, sink)
    pos_embed = trace["pos_embed"].float().cpu() if "pos_embed" in trace else None
    src = graph_rows.sources(fz, layer, pos, feat, act, errors, trace["embed"][0].float().cpu(), pos_embed)
    u = _unembed_direction(model, target, dtype)
    t = x.numel()
    idx, rows = graph_rows.compute_rows(fz, src, u, t - 1, settings.rows(model.config, t), progress, should_stop)
    keep, edges, bias = _edges_and_biases(fz, src, idx, rows, u, t)
    value = float(logits[target.token] - (logits[target.versus] if target.kind == "difference" else 0))
    prob = float(logits[: n_words(lm)].softmax(-1)[target.token])
    feats = torch.stack([layer[keep], pos[keep], feat[keep]], 1)
    slopes = real_slopes(model, x, transcoders, target.token, target.versus, feats)
    source = lm.source if hasattr(lm, "source") else ""
    about = (source, transcoders.identity, tuple(int(i) for i in x), target, value, prob)
    kept, n_active = act[keep].clone(), int(act.numel())
    return Graph(*about, model.config.n_layer, pos_embed is not None, feats, kept, edges, bias, n_active, slopes, sink)


def _edges_and_biases(fz, src, idx: torch.Tensor, rows: torch.Tensor, u: torch.Tensor, t: int):
    """The computed rows in node order: the kept row nodes, the edge matrix and each row's bias."""
    keep, order = torch.sort(idx)
    edges = _assemble(src, keep, rows, torch.cat([order, torch.tensor([idx.numel()])]), t)
    return keep, edges, _biases(fz, src, keep, u, t)


def _check_transcoders(model, transcoders) -> None:
    """The model can be frozen, and the set is one trained for a model of its width and depth."""
    graph_frozen.check_model(model)
    if (transcoders.cfg.d_model, transcoders.cfg.n_layer) != (model.config.d_model, model.config.n_layer):
        raise ValueError(
            f"these transcoders are for a model {transcoders.cfg.d_model} wide with "
            f"{transcoders.cfg.n_layer} layers, not this one: pick the set trained for it"
        )


def _assemble(src, keep: torch.Tensor, rows: torch.Tensor, row_order: torch.Tensor, t: int) -> torch.Tensor:
    """The rows (in `row_order`) with the graph's columns: kept features renumbered, every other
    feature's column added to its (layer, position)'s error column, a last (empty) one for the target."""
    n, n_keep = src.n_features, keep.numel()
    colmap = torch.empty(src.n_cols, dtype=torch.long)
    colmap[:n] = n_keep + src.layer * t + src.pos  # unvisited: into their error
    colmap[keep] = torch.arange(n_keep)
    colmap[n:] = torch.arange(n_keep, n_keep + src.n_cols - n)
    out = torch.zeros(rows.shape[0], n_keep + src.n_cols - n + 1, dtype=rows.dtype)
    return out.index_add_(1, colmap, rows)[row_order]


def _biases(fz, src, keep: torch.Tensor, u: torch.Tensor, t: int) -> torch.Tensor:
    """Each row's constant: the frozen model run with every source at zero (float64)."""
    zero = torch.zeros(t, src.errors.shape[2], dtype=fz.dtype)
    m_ins, logit = graph_frozen.forward(fz, zero, [zero] * fz.n_layer, u)
    out = []
    for j in keep.tolist():
        c = fz.layers[int(src.layer[j])]
        f = int(src.feature[j])
        out.append(m_ins[int(src.layer[j]), int(src.pos[j])] @ c.w_enc[:, f] + c.b_enc[f])
    out.append(logit[t - 1])
    return torch.stack(out).double()
