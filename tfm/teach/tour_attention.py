"""The tour's attention steps for one block and head: q, k and v (with grouped-query attention,
whose k and v a query head reads), the scaled scores, the mask (causal, sliding-window or none),
the softmax, the weighted sum of the values and the heads merged through W_O."""

from __future__ import annotations

import math

import torch

from ..core.trace import Trace
from ..core.trace_read import head_qkv
from ..core.window import layer_window
from .checks import attend_check, params_check
from .tour_shown import SHOW, Focus, Shown, TourStep, mask_matrix, row, vec


def _heads_sentence(cfg, h: int) -> str:
    """How many heads the layer has and, with grouped-query attention, whose k and v head h reads."""
    if cfg.group_size == 1:
        return f", {cfg.n_head} heads of d_head = {cfg.d_head} each."
    kind = "multi-query" if cfg.n_kv_head == 1 else "grouped-query"
    return (
        f". The layer's {cfg.n_head} query heads (d_head = {cfg.d_head}) share {cfg.n_kv_head} key/value "
        f"head{'s' if cfg.n_kv_head > 1 else ''} ({kind} attention): query head {h} reads the k and v "
        f"of {cfg.kv_sharing(h)}."
    )


def _qkv_formula(cfg, h: int, x: str) -> str:
    """q, k, v of query head h; with shared key/value heads, k and v carry their own index g."""
    if cfg.group_size == 1:
        return rf"q = {x}\,W_Q,\quad k = {x}\,W_K,\quad v = {x}\,W_V"
    g = cfg.kv_head(h)
    return (
        rf"q^{{({h})}} = {x}\,W_Q^{{({h})}},\quad k^{{(g)}} = {x}\,W_K^{{(g)}},\quad "
        rf"v^{{(g)}} = {x}\,W_V^{{(g)}},\quad g = \lfloor {h} / {cfg.group_size} \rfloor = {g}"
    )


def _kv_vec(cfg, x: torch.Tensor, h: int) -> Shown:
    """A key or value row; with shared key/value heads its note says whose it is."""
    shown = vec(x)
    if cfg.group_size == 1:
        return shown
    return Shown(shown.values, shown.shape, shown.cols, note="; ".join(filter(None, (shown.note, cfg.kv_sharing(h)))))


def attention_steps(lm, tr: Trace, labels, f: Focus) -> list[TourStep]:
    """Block `f.layer`, head `f.head` at the focus position: q, k, v, scores, mask, softmax, the
    weighted sum and the heads merged through W_O."""
    cfg, p, b, h = lm.config, f.pos, f"blocks.{f.layer}", f.head
    hd, pre = cfg.d_head, cfg.norm_placement == "pre"
    q, k, v = head_qkv(tr, cfg, f.layer, h)  # (T, hd) each: k, v of h's kv head
    x_in = tr[f"{b}.ln1.output" if pre else f"{b}.resid_pre"][0, p]
    where = f"block {f.layer}, head {h}"
    rope = cfg.pos_encoding == "rope"
    dots = k[: p + 1] @ q[p]  # (p+1,)
    all_scores = tr[f"{b}.attn.scores"][0, h]  # (T, T)
    scores, pattern = all_scores[p], tr[f"{b}.attn.pattern"][0, h, p]
    in_name = "LN1(x)" if pre else "x"
    shared = f" (those of {cfg.kv_sharing(h)})" if cfg.group_size > 1 else ""
    return [
        TourStep(
            "qkv",
            f"Query, key and value ({where})",
            _qkv_formula(cfg, h, in_name),  # the RoPE note is text: a projector cuts a long formula
            f"Three matrices turn the {'normalised ' if pre else ''}residual vector into a query (what this token "
            f"looks for), a key (what it offers) and a value (what it passes on)"
            + _heads_sentence(cfg, h)
            + (" Then RoPE rotates q and k by this position's angles." if rope else ""),
            {in_name: vec(x_in), "q": vec(q[p]), "k": _kv_vec(cfg, k[p], h), "v": _kv_vec(cfg, v[p], h)},
            "pages/attention.py",
            params_check(lm.model, f.layer),
        ),
        TourStep(
            "scores",
            "Scores: query · key, divided by √d_k",
            rf"s_j = \frac{{q_{{{p}}} \cdot k_j}}{{\sqrt{{d_k}}}},\quad \sqrt{{d_k}} = \sqrt{{{hd}}} = {math.sqrt(hd):.3f}",
            f"Each earlier key{shared} is compared with this query by a dot product. Dividing by √d_k keeps the "
            "scores from growing with the head size, so the softmax does not saturate.",
            {"q · k_j": row(dots, p, labels, f"{p + 1}"), "s_j": row(scores, p, labels, f"{p + 1}")},
            "pages/attention.py",
        ),
        _mask_step(cfg, f.layer, mask_matrix(all_scores, p, labels)),
    ] + _mixing_steps(lm, tr, labels, f, pattern)


def _mask_step(cfg, layer: int, shown: Shown) -> TourStep:
    """The causal mask; on a local layer also the sliding window (why a key that came before is masked); an
    encoder has none (the step keeps its key: every model's tour has the same steps)."""
    if not cfg.causal:
        return _no_mask_step(shown)
    text = (
        "Keys after each query (above the diagonal) are set to −∞, so they get zero weight: a token only sees the "
        "past. That is what lets the model be trained on every position of a text at once."
    )
    w, n_local = layer_window(cfg, layer), len(cfg.local_layers)
    if w is None:
        return TourStep(
            "mask",
            "Causal mask: no looking ahead",
            r"s_j = -\infty \quad\text{for } j > i",
            text
            + (
                f" Block {layer} is a global layer: it reads every earlier key. The other {n_local} "
                f"layers are local, each reading only the last {cfg.sliding_window} keys."
                if n_local
                else ""
            ),
            {"scores, rows = queries": shown},
            "pages/attention.py",
        )
    return TourStep(
        "mask",
        "Causal and sliding-window mask (a local layer)",
        rf"s_j = -\infty \quad\text{{for }} j > i \text{{ or }} j \le i - {w}",
        text + _local_sentence(cfg, layer, w),
        {"scores, rows = queries": shown},
        "pages/attention.py",
    )


def _no_mask_step(shown: Shown) -> TourStep:
    """An encoder's: nothing is masked."""
    return TourStep(
        "mask",
        "No mask: every token sees every token",
        r"s_j \text{ kept for every } j",
        "An encoder reads the whole text at once: nothing is set to −∞, so each token attends to the "
        "tokens after it as well as before (only padding would be masked). BERT is trained to fill in "
        "hidden words, which needs both sides.",
        {"scores, rows = queries": shown},
        "pages/attention.py",
    )


def _local_sentence(cfg, layer: int, w: int) -> str:
    """Why a local layer masks a key that came before, and which layers are global."""
    glob = ", ".join(str(i) for i in range(cfg.n_layer) if i not in cfg.local_layers) or "none"
    return (
        f" Block {layer} is a local layer: a key more than {w - 1} positions back is masked too, "
        f"however relevant, because the layer reads only a window of the last {w} keys (cheaper, and "
        f"its KV cache keeps only the window). {len(cfg.local_layers)} of the {cfg.n_layer} layers are local; the "
        f"global ones ({glob}) read every earlier key."
    )


def _mixing_steps(lm, tr: Trace, labels, f: Focus, pattern: torch.Tensor) -> list[TourStep]:
    """softmax weights, their sum of values, and the heads merged through W_O."""
    cfg, p, b, h = lm.config, f.pos, f"blocks.{f.layer}", f.head
    z = tr[f"{b}.attn.z"][0, :, p]  # (H, hd): one row per query head
    return [
        _softmax_step(labels, p, f"block {f.layer}, head {h}", pattern),
        _weighted_step(cfg, h, z[h]),
        _heads_step(cfg, h, z, vec(tr[f"{b}.attn_out"][0, p])),
    ]


def _softmax_step(labels, p: int, where: str, pattern: torch.Tensor) -> TourStep:
    return TourStep(
        "softmax",
        "Softmax: scores become weights that sum to 1",
        r"a_j = \frac{e^{s_j}}{\sum_{m \le i} e^{s_m}}",
        f"The weights of {where} for {labels[p]!r}. The chart shows every key; the table the last few.",
        {"a_j": row(pattern, p, labels, f"{p + 1}")},
        "pages/attention.py",
        attend_check(pattern[: p + 1], labels, p, where),
        Shown(pattern[: p + 1].float().clone(), (p + 1,), tuple(labels[: p + 1])),
    )


def _weighted_step(cfg, h: int, z: torch.Tensor) -> TourStep:
    """Head h's output z (d_head,): its weights times the values (with shared key/value heads, whose)."""
    values = (
        ""
        if cfg.group_size == 1
        else (
            f" The values are those of {cfg.kv_sharing(h)}: the heads of a group "
            "mix the same values, each with its own weights."
        )
    )
    return TourStep(
        "weighted",
        "Weighted sum of the values",
        r"z = \sum_{j \le i} a_j\, v_j",
        f"The head's output is the values mixed by those weights: a vector of d_head = {cfg.d_head}." + values,
        {"z": vec(z)},
        "pages/attention.py",
    )


def _heads_step(cfg, h: int, z: torch.Tensor, attn_out: Shown) -> TourStep:
    """Every head's z (H, d_head) side by side, then W_O back to d_model."""
    hd = cfg.d_head
    own = (
        ""
        if cfg.group_size == 1
        else " Query heads that share a key/value head still have their own queries, so their weights and outputs differ."
    )
    per_head = Shown(
        z[:, :SHOW].float().clone(),
        tuple(z.shape),
        tuple(str(i) for i in range(min(hd, SHOW))),
        rows=tuple(f"head {i}" for i in range(z.shape[0])),
        note=f"first {SHOW} of {hd} per head" if hd > SHOW else "",
    )
    return TourStep(
        "heads",
        "All heads concatenated, then W_O",
        r"\mathrm{attn}(x) = \big[z^{(1)}; \dots; z^{(H)}\big]\, W_O" + (r" + b_O" if cfg.bias else ""),
        f"The {cfg.n_head} heads' outputs are placed side by side ({cfg.n_head} × {hd} = {cfg.d_model}) "
        "and one matrix mixes them back into the residual stream's size." + own,
        {"z per head": per_head, "attn_out": attn_out},
        "pages/shapes.py",
    )
