"""Causal experiments in batches: ablate every head, patch every head or residual stream.

A sweep repeats the prompt along the batch axis and gives each row one edit (`tfm.core.edits`
with `row=r`), so ablating all L x H heads is a few batched forwards, not L x H separate ones;
rows start at their first edited layer from the unedited stream (`run_rows`). Batches are
cut into chunks whose activations fit `budget_bytes` (`row_bytes`). Only the logits of the
measured position are computed (a (rows, V) product, not (rows, T, V)). Patching the residual
stream at one position (`patch_resid`) leaves the positions before it as they were, so those
rows run the later positions only, on the unedited run's keys and values.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core import cancel
from ..core import edits as E
from ..core.kv_cache import KVCache
from .attribution import _ids, _model, check_position, head_and_mlp_names

# re-exported (pages and tests read them as patching.*): the pairs a model knows, its induction check
from .known import EXAMPLES, KNOWN_MARGIN, NAME_SWAP, STORY, InductionCheck, PromptPair  # noqa: F401
from .known import induction_check, knows, opening_pair  # noqa: F401

BUDGET_BYTES = 256 * 2**20


def row_bytes(cfg, t: int, itemsize: int = 4) -> int:
    """Activation bytes one batch row holds at once in a plain forward (generous): the stream
    and its norm, q/k/v and the merged heads (~6 D per token), the MLP hidden and its
    activation (2 F), one layer's attention scores and pattern (2 H T), the measured logits (V)."""
    return itemsize * (t * (8 * cfg.d_model + 2 * cfg.d_ff + 2 * cfg.n_head * t) + cfg.vocab_size)


@dataclass(frozen=True)
class Metric:
    """logit(token) at `position`, minus logit(versus) when given."""

    position: int
    token: int
    versus: int | None = None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:  # (R, V) -> (R,)
        out = logits[:, self.token].double()
        return out - logits[:, self.versus].double() if self.versus is not None else out


def _first_layer(edits: Sequence[E.Edit], n_layer: int) -> int:
    return min((e.layer for e in edits), default=n_layer)


@torch.no_grad()
def clean_streams(
    model, x: torch.Tensor, cache: KVCache | None = None
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The unedited residual stream entering every block, and after the last: (L+1) x (1, T, D),
    with the RoPE angles (None without RoPE). A `cache` given keeps every layer's keys and values."""
    h, angles = model.embed(x, 0, None)
    streams = [h]
    for i, block in enumerate(model.blocks):
        streams.append(block(streams[-1], None, angles, cache, i))
    if cache is not None:
        cache.advance(x.shape[1])
    return streams, angles


class _Prefix:
    """The unedited run's keys and values before position `p`, as a KV cache for rows that run
    positions p.. only: a patch at p cannot change what came before it (attention is causal)."""

    def __init__(self, run: KVCache, p: int) -> None:
        self.run, self.p = run, p

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = k.shape[0]
        pk = self.run.k[layer, :, :, : self.p].expand(rows, -1, -1, -1)  # (R, Hkv, p, hd)
        pv = self.run.v[layer, :, :, : self.p].expand(rows, -1, -1, -1)
        return torch.cat([pk, k], 2), torch.cat([pv, v], 2)  # (R, Hkv, p + T', hd)

    def attn_mask(self, t_q: int):
        return None  # causal from the shapes: the queries are the last t_q positions


def _logits(model, h: torch.Tensor) -> torch.Tensor:
    """(R, D) streams after the last block -> (R, V) float32 logits."""
    return model.unembed(model.ln_final(h) if model.ln_final is not None else h).float()


@torch.no_grad()
def run_rows(
    lm,
    ids,
    row_edits: Sequence[Sequence[E.Edit]],
    position: int = -1,
    budget_bytes: int = BUDGET_BYTES,
    should_stop: cancel.ShouldStop = None,
) -> torch.Tensor:
    """Logits at `position` of the prompt run once per entry of `row_edits`, each row with its
    own edits: (R, V) float32 on the CPU. Nothing before a row's first edited layer can change,
    so a row joins the batch at that layer from the unedited stream there: a sweep over every
    layer costs about half its rows' full forwards. Batches are bounded by `budget_bytes`;
    `should_stop` is asked between them (tfm.core.cancel)."""
    model = _model(lm)
    x = _ids(model, ids)
    p = check_position(position, x.shape[1])
    cfg = model.config
    chunk = max(1, budget_bytes // row_bytes(cfg, x.shape[1]))
    streams, angles = clean_streams(model, x)
    out = torch.empty(len(row_edits), cfg.vocab_size)
    order = sorted(range(len(row_edits)), key=lambda r: _first_layer(row_edits[r], cfg.n_layer))
    for c in range(0, len(order), chunk):
        cancel.check(should_stop, "the patched rows")
        part = order[c : c + chunk]
        h = _joined_rows(model, streams, angles, [row_edits[r] for r in part])
        out[part] = _logits(model, h[:, p]).cpu()  # (R, V)
    return out


def _joined_rows(model, streams, angles, rows: Sequence[Sequence[E.Edit]]) -> torch.Tensor:
    """The stream after the last block (R, T, D) of `rows`, sorted by first edited layer: each
    joins the batch at that layer, so every block runs once for all the rows that reached it."""
    cfg, t = model.config, streams[0].shape[1]
    starts = [_first_layer(es, cfg.n_layer) for es in rows]
    h = streams[starts[0]][:0] if starts[0] < cfg.n_layer else None  # (0, T, D): no row yet
    for i in range(starts[0], cfg.n_layer):
        n = bisect_right(starts, i)  # rows that start by block i
        if n > h.shape[0]:
            h = torch.cat([h, streams[i].expand(n - h.shape[0], -1, -1)])  # (n, T, D)
        flat = [E.with_row(e, r) for r in range(n) for e in rows[r] if e.layer == i]
        h = model.blocks[i](h, None, angles, None, i, E.Edits.of(flat, cfg, (n, t)).scoped(i) if flat else None)
    if h is None:  # no row has an edit
        return streams[-1].expand(len(rows), -1, -1)
    if h.shape[0] < len(rows):  # rows with no edit come last
        h = torch.cat([h, streams[-1].expand(len(rows) - h.shape[0], -1, -1)])
    return h


def _resid_rows(model, base, angles, run: KVCache, clean_resid, p: int, layers: range, q: int, metric: Metric):
    """The metric with the stream entering block l at position p taken from `clean_resid[l]`, for
    l in `layers`, one per row: positions p.. only of the corrupted run (`base`: its streams, `run`:
    its keys and values), row l joining the batch at block l."""
    cfg, h = model.config, None
    prefix = _Prefix(run, p)
    ang = angles[p:] if angles is not None else None
    for i in range(layers.start, cfg.n_layer):
        if i in layers:
            row = base[i][:, p:].clone()  # (1, T - p, D)
            row[:, 0] = clean_resid[i][p]
            h = row if h is None else torch.cat([h, row])  # (R, T - p, D): rows l <= i
        h = model.blocks[i](h, None, ang, prefix, i)
    return metric(_logits(model, h[:, q - p]))  # (R,)


@torch.no_grad()
def patch_resid(
    model,
    clean_resid: Sequence[torch.Tensor],
    corrupt: torch.Tensor,
    metric: Metric,
    budget_bytes: int = BUDGET_BYTES,
    should_stop: cancel.ShouldStop = None,
) -> torch.Tensor:
    """The metric (L, T) with the residual stream entering block l at position p patched from the
    clean run (`clean_resid[l]`: (T, D)) into the `corrupt` ids (1, T). Positions before p are
    the corrupted run's, so a row runs positions p.. with that run's keys and values; a patch
    after the measured position changes nothing there (its value is the corrupted run's)."""
    cfg, t = model.config, corrupt.shape[1]
    q = check_position(metric.position, t)
    p0 = next(iter(model.parameters()))
    run = KVCache(cfg, 1, t, p0.device, p0.dtype)
    streams, angles = clean_streams(model, corrupt, run)
    out = torch.empty(cfg.n_layer, t, dtype=torch.float64)
    out[:, q + 1 :] = float(metric(_logits(model, streams[-1][:, q])))
    # A row at p also holds the keys before p and (T - p) x T scores: a full-length row bounds it.
    chunk = max(1, budget_bytes // row_bytes(cfg, t))
    for p in range(q + 1):
        for a in range(0, cfg.n_layer, chunk):
            cancel.check(should_stop, "residual-stream patching")
            layers = range(a, min(a + chunk, cfg.n_layer))
            out[a : layers.stop, p] = _resid_rows(model, streams, angles, run, clean_resid, p, layers, q, metric).cpu()
    return out


@dataclass(frozen=True)
class Sweep:
    """Metric of the unedited run (`base`) and after each edit: `heads` (L, H), `mlps` (L,)."""

    metric: Metric
    base: float
    heads: torch.Tensor
    mlps: torch.Tensor

    @property
    def head_effects(self) -> torch.Tensor:
        return self.heads - self.base

    @property
    def mlp_effects(self) -> torch.Tensor:
        return self.mlps - self.base


def ablation_sweep(
    lm,
    ids,
    metric: Metric,
    mode: E.Mode = "zero",
    budget_bytes: int = BUDGET_BYTES,
    should_stop: cancel.ShouldStop = None,
) -> Sweep:
    """Ablate every head, then every MLP, one per row: the metric after each (one batch,
    chunked). Row 0 is the unedited prompt."""
    cfg = _model(lm).config
    L, H = cfg.n_layer, cfg.n_head
    rows = (
        [[]]
        + [[E.AblateHead(l, h, mode)] for l in range(L) for h in range(H)]
        + [[E.AblateMLP(l, mode)] for l in range(L)]
    )
    m = metric(run_rows(lm, ids, rows, metric.position, budget_bytes, should_stop))
    return Sweep(metric, float(m[0]), m[1 : 1 + L * H].reshape(L, H), m[1 + L * H :])


@dataclass(frozen=True)
class Patching:
    """Activation patching from a clean into a corrupted run, normalised: 1 = the patch restores
    the clean metric, 0 = it changes nothing. `heads` (L, H): each head's z at every position;
    `resid` (L, T): the residual stream entering block l at one position."""

    metric: Metric
    clean: float
    corrupt: float
    heads: torch.Tensor
    resid: torch.Tensor


def same_length(tok, clean: Sequence[int], corrupt: Sequence[int]) -> None:
    if len(clean) != len(corrupt):
        show = lambda ids: " | ".join(tok.display_piece(t) for t in ids)  # noqa: E731
        raise ValueError(
            f"activation patching needs prompts of the same token length: the clean prompt has "
            f"{len(clean)} tokens [{show(clean)}], the corrupted one {len(corrupt)} [{show(corrupt)}]"
        )


@torch.no_grad()
def patch_prompts(
    lm,
    clean: Sequence[int],
    corrupt: Sequence[int],
    metric: Metric,
    budget_bytes: int = BUDGET_BYTES,
    should_stop: cancel.ShouldStop = None,
) -> Patching:
    """Patch every head's output (all positions) and every layer x position of the residual
    stream from the clean run into the corrupted one, one patch per batch row."""
    model = _model(lm)
    if getattr(lm, "tokenizer", None) is not None:
        same_length(lm.tokenizer, clean, corrupt)
    elif len(clean) != len(corrupt):
        raise ValueError(f"prompts of different token lengths: {len(clean)} and {len(corrupt)}")
    cfg, t = model.config, len(clean)
    tr = model(_ids(model, clean), trace=True).trace
    z = [tr[f"blocks.{l}.attn.z"][0] for l in range(cfg.n_layer)]  # (H, T, hd) each
    resid = [tr[f"blocks.{l}.resid_pre"][0] for l in range(cfg.n_layer)]  # (T, D) each
    rows = [[]] + [[E.Patch(f"blocks.{l}.attn.z", z[l], head=h)] for l in range(cfg.n_layer) for h in range(cfg.n_head)]
    m = metric(run_rows(model, corrupt, rows, metric.position, budget_bytes, should_stop))
    m = torch.cat([m, patch_resid(model, resid, _ids(model, corrupt), metric, budget_bytes, should_stop).ravel()])
    clean_m = float(metric(tr.logits_at(metric.position)[None]))  # one row, not the (T, V) logits
    corrupt_m, span = float(m[0]), clean_m - float(m[0])
    if abs(span) < 1e-6:
        raise ValueError(
            f"the clean and corrupted prompts give the same metric ({clean_m:.4f}): choose prompts whose answers differ"
        )
    norm = (m[1:] - corrupt_m) / span
    nh = cfg.n_layer * cfg.n_head
    return Patching(
        metric, clean_m, corrupt_m, norm[:nh].reshape(cfg.n_layer, cfg.n_head), norm[nh:].reshape(cfg.n_layer, t)
    )


@torch.no_grad()
def ablated_probs(
    lm,
    ids: Sequence[int],
    position: int,
    heads: Sequence[tuple[int, int]] = (),
    mlps: Sequence[int] = (),
    neurons: Sequence[tuple[int, int]] = (),
    mode: E.Mode = "zero",
) -> torch.Tensor:
    """Next-token probabilities at `position`, (V,) float32 on the CPU, with the chosen heads
    (layer, head), MLPs (layer) and neurons (layer, index) ablated in one forward."""
    model = _model(lm)
    edits = [E.AblateHead(l, h, mode) for l, h in heads] + [E.AblateMLP(l, mode) for l in mlps]
    by_layer: dict[int, list[int]] = {}
    for l, n in neurons:
        by_layer.setdefault(l, []).append(n)
    edits += [E.AblateNeurons(l, tuple(ns), mode) for l, ns in by_layer.items()]
    h = model.hidden(_ids(model, ids), edits=edits)[:, position]  # (1, D)
    return model.unembed(h)[0].float().softmax(-1).cpu()


@dataclass(frozen=True)
class EstimateVsAblation:
    """Every head (layer by layer) then every MLP: its direct attribution (an estimate from one
    pass) and what the metric really changes when it is ablated (`Sweep`), in `names`' order."""

    names: tuple[str, ...]
    estimate: tuple[float, ...]
    effect: tuple[float, ...]


def estimate_vs_ablation(attr, sweep: Sweep) -> EstimateVsAblation:
    """An `attribution.Attribution` beside an `ablation_sweep` of the same metric."""
    L, H = attr.heads.shape
    estimate = attr.heads.detach().cpu().numpy().ravel().tolist() + attr.mlps.detach().cpu().numpy().tolist()
    effect = (
        sweep.head_effects.detach().cpu().numpy().ravel().tolist() + sweep.mlp_effects.detach().cpu().numpy().tolist()
    )
    return EstimateVsAblation(tuple(head_and_mlp_names(L, H)), tuple(estimate), tuple(effect))
