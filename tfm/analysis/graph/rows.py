"""The rows of an attribution graph: each node's direct effects from every source, by batched
transposed passes through the frozen replacement model (`frozen`).

A row is a node with inputs (an active feature, whose pre-activation is m_in W_enc[:, f] + b_enc[f],
or the target logit); its columns are the sources: every active feature, every (layer, position)
error, every token embedding (and position embedding). Many rows run at once: the gradient of R
rows is one (R, T', D) tensor, T' the last position any of them sits at (causal: nothing later
reaches them), and a pass starts at the highest block any of them reads.

When a prompt has more active features than `max_rows`, the rows are chosen as circuit-tracer
chooses them: the target first, then batch after batch the unvisited features of most influence on
the target through the rows known so far. A feature never visited stays a source; in the finished
graph its columns are added to its (layer, position)'s error column (what it writes is then counted
as unexplained: exact, and conservative for the scores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...core import cancel
from .frozen import Frozen

Progress = Callable[[float, str], None] | None


@dataclass(frozen=True, eq=False)
class Sources:
    """Every source of the prompt, in column order: features (layer-major, then position, then
    feature id), errors (layer-major, then position), token embeddings, position embeddings."""

    layer: torch.Tensor  # (N,) long, each active feature's block
    pos: torch.Tensor  # (N,) long
    feature: torch.Tensor  # (N,) long
    act: torch.Tensor  # (N,) its activation (= its pre-activation: TopK keeps only positive ones)
    errors: torch.Tensor  # (L, T, D) real mlp_out minus the transcoder's output
    embed: torch.Tensor  # (T, D)
    pos_embed: torch.Tensor | None  # (T, D)
    slots: tuple  # per block: (T, S) long, feature indices per position, -1 padded
    vectors: tuple  # per block: (T, S, D) act * W_dec[feature] in slot order (0 where padded)

    @property
    def n_features(self) -> int:
        return int(self.layer.numel())

    @property
    def n_cols(self) -> int:
        n_l, t = self.errors.shape[:2]
        return self.n_features + n_l * t + t * (2 if self.pos_embed is not None else 1)


def sources(fz: Frozen, layer, pos, feature, act, errors, embed, pos_embed) -> Sources:
    n_l, t = errors.shape[:2]
    slots, vectors = [], []
    for i in range(n_l):
        idx = (layer == i).nonzero().squeeze(1)  # this block's features
        counts = torch.bincount(pos[idx], minlength=t)
        width = max(int(counts.max()) if idx.numel() else 0, 1)
        slot = torch.full((t, width), -1, dtype=torch.long)
        rank = torch.arange(idx.numel()) - torch.cumsum(counts, 0).sub(counts)[pos[idx]]  # order within a position
        slot[pos[idx], rank] = idx
        vec = torch.zeros(t, width, fz.layers[i].w_dec.shape[1], dtype=fz.dtype)
        vec[pos[idx], rank] = act[idx, None].to(fz.dtype) * fz.layers[i].w_dec[feature[idx]]
        slots.append(slot)
        vectors.append(vec)
    return Sources(
        layer,
        pos,
        feature,
        act,
        errors.to(fz.dtype),
        embed.to(fz.dtype),
        None if pos_embed is None else pos_embed.to(fz.dtype),
        tuple(slots),
        tuple(vectors),
    )


def _seed(fz: Frozen, p: torch.Tensor, vec: torch.Tensor, scale: torch.Tensor, wb) -> torch.Tensor:
    """The transposed norm applied to one seed vector per row (n, D), at each row's position."""
    g = vec * wb[0] / scale[p][:, None]
    return g - g.mean(-1, keepdim=True) if fz.layernorm else g


def backward(fz: Frozen, src: Sources, idx: torch.Tensor, u: torch.Tensor, target_pos: int) -> torch.Tensor:
    """Direct effects on R rows, (R, n_cols): row r is the source feature idx[r] (its seed
    W_enc[:, f] enters through its block's ln2), or the target logit at target_pos when idx[r] is
    -1 (its seed u through the final norm). Rows run highest block first: at block i only the
    rows seeded at i or above carry a gradient, a prefix of the batch."""
    n_l, t_all, d = src.errors.shape
    is_f = idx >= 0
    safe = idx.clamp(min=0)
    layers = torch.where(is_f, src.layer[safe], n_l)
    order = torch.argsort(-layers, stable=True)
    idx, layers, is_f, safe = idx[order], layers[order], is_f[order], safe[order]
    pos = torch.where(is_f, src.pos[safe], target_pos)
    feats = torch.where(is_f, src.feature[safe], -1)
    r, t = layers.numel(), int(pos.max()) + 1
    out = torch.zeros(r, src.n_cols, dtype=fz.dtype)
    g = torch.zeros(r, t, d, dtype=fz.dtype)
    top = int((layers == n_l).sum())
    if top:
        g[torch.arange(top), pos[:top]] = _seed(fz, pos[:top], u.expand(top, d), fz.final_scale, fz.final)
    err0 = src.n_features
    for i in range(min(int(layers.max()), n_l - 1), -1, -1):
        n = int((layers >= i).sum())  # rows carrying a gradient here
        _source_edges(src, i, g[:n], out, err0 + i * t_all)
        c, (g1, g2) = fz.layers[i], fz.gains[i]
        if not fz.parallel:
            _inject(fz, g, layers, pos, i, feats, c, g2)  # the seed enters after attention: at resid_mid
        g[:n] += fz.norm_t(fz.attention_t(g[:n], c), c.scale1[:t], g1)
        if fz.parallel:
            _inject(fz, g, layers, pos, i, feats, c, g2)  # the MLP reads the block's input
    emb0 = err0 + n_l * t_all
    out[:, emb0 : emb0 + t] = torch.einsum("rtd,td->rt", g, src.embed[:t])
    if src.pos_embed is not None:
        out[:, emb0 + t_all : emb0 + t_all + t] = torch.einsum("rtd,td->rt", g, src.pos_embed[:t])
    return out[torch.argsort(order)]


def _inject(fz, g, layers, pos, i, feature_ids, c, g2) -> None:
    """Add the seeds of the rows whose feature sits at block i (their features' W_enc columns)."""
    rows = (layers == i).nonzero().squeeze(1)
    if rows.numel():
        seeds = c.w_enc[:, feature_ids[rows]].T  # (R_i, D)
        g[rows, pos[rows]] += _seed(fz, pos[rows], seeds, c.scale2, g2)


def _source_edges(src: Sources, i: int, g: torch.Tensor, out: torch.Tensor, err_col: int) -> None:
    """Effects of what block i's features and error wrote, from g = the gradient at its output."""
    n, t = g.shape[:2]
    slot, vec = src.slots[i][:t], src.vectors[i][:t]  # (T', S), (T', S, D)
    per = torch.bmm(g.transpose(0, 1), vec.transpose(1, 2))  # (T', R, S)
    keep = slot >= 0
    out[:n, slot[keep]] = per.permute(1, 0, 2)[:, keep]
    out[:n, err_col : err_col + t] = torch.einsum("rtd,td->rt", g, src.errors[i, :t])


def batch_rows(t: int, d: int, budget: int = 64 * 2**20) -> int:
    """Rows per pass: a few (R, T, D) tensors within `budget` bytes."""
    return max(1, min(512, budget // (t * d * 4 * 6)))


def influence(rows: torch.Tensor, row_cols: torch.Tensor, weights: torch.Tensor, depth: int) -> torch.Tensor:
    """Influence on the target of every column through the rows known: rows (R, C) edges, each row
    normalised by its absolute sum; row_cols (R,) each row's own column (-1: none, the target);
    weights (R,) the start (1 on the target). Sums weights A + weights A^2 + ... (a DAG: at most
    `depth` steps)."""
    a = rows.abs()
    a /= a.sum(1, keepdim=True).clamp(min=1e-10)
    has_col = row_cols >= 0
    cur, total = weights.to(a.dtype), torch.zeros(a.shape[1], dtype=a.dtype)
    for _ in range(depth + 1):
        step = cur @ a  # (C,)
        total += step
        cur = torch.zeros_like(cur)
        cur[has_col] = step[row_cols[has_col]]
        if not bool(cur.any()):
            break
    return total


def compute_rows(
    fz: Frozen,
    src: Sources,
    u: torch.Tensor,
    target_pos: int,
    max_rows: int,
    progress: Progress = None,
    should_stop: cancel.ShouldStop = None,
):
    """(visited feature indices (n,), their rows and last the target's (n + 1, C)): every feature
    when they fit in `max_rows`, else the most influential ones chosen batch by batch."""
    n_l, t, d = src.errors.shape
    size, n = batch_rows(t, d), src.n_features
    cap = min(n, max_rows)
    buf = torch.zeros(cap + 1, src.n_cols, dtype=fz.dtype)  # rows in visiting order, the target last
    buf[cap] = backward(fz, src, torch.tensor([-1]), u, target_pos)[0]
    if n <= max_rows:  # every one: highest blocks first, so a pass starts where its rows do
        order = torch.tensor(sorted(range(n), key=lambda j: (-int(src.layer[j]), int(src.pos[j]))), dtype=torch.long)
        for s in range(0, n, size):
            cancel.check(should_stop, "the attribution graph")
            e = min(s + size, n)
            buf[s:e] = backward(fz, src, order[s:e], u, target_pos)
            if progress is not None:
                progress(e / n, f"{e:,} of {n:,} feature rows")
        return order, buf
    idx = _greedy(fz, src, u, target_pos, buf, size, progress, should_stop)
    return idx, torch.cat([buf[: idx.numel()], buf[cap:]]) if idx.numel() < cap else buf


def _greedy(fz, src, u, target_pos, buf, size, progress, should_stop) -> torch.Tensor:
    """Fills buf's rows with the most influential unvisited features, batch by batch (influence
    through the rows known so far); returns their indices in row order."""
    n_l, cap = src.errors.shape[0], buf.shape[0] - 1
    visited = torch.zeros(src.n_features, dtype=torch.bool)
    idx = torch.zeros(0, dtype=torch.long)
    while idx.numel() < cap:
        cancel.check(should_stop, "the attribution graph")
        known = torch.cat([torch.arange(idx.numel()), torch.tensor([cap])])  # the rows filled, the target
        weights = torch.zeros(known.numel())
        weights[-1] = 1.0
        inf = influence(buf[known], torch.cat([idx, torch.tensor([-1])]), weights, n_l + 1)[: src.n_features]
        inf[visited] = -1.0
        b = inf.topk(min(size, cap - idx.numel())).indices
        b = b[inf[b] > 0]
        if not b.numel():
            break
        visited[b] = True
        buf[idx.numel() : idx.numel() + b.numel()] = backward(fz, src, b, u, target_pos)
        idx = torch.cat([idx, b])
        if progress is not None:
            progress(idx.numel() / cap, f"{idx.numel():,} of {cap:,} feature rows (the most influential)")
    if progress is not None and idx.numel() < cap:
        progress(1.0, f"{idx.numel():,} feature rows: no other feature reaches the target")
    return idx
