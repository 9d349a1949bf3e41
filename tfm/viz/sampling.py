"""Figures for next-token sampling, generation timelines and the logit lens.

Pure functions: tensors / numpy arrays and token pieces in, `go.Figure` (or plain data) out.
Token text is HTML-escaped here, because plotly renders a subset of HTML in labels and hover.
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import torch

from ..generation.sampling import Breakdown
from ..generation.timeline import StepRecord
from ..core.trace_names import head_label
from .figure_dicts import figure

# Temperatures a slider offers: fine steps near 0, where small changes matter most.
TEMPERATURES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
                1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.5, 3.0)
# Why each bar has the colour it has; patterns repeat the message for colour-blind readers.
STATUS = {
    "kept": ("kept (can be sampled)", "#1f6fb4", ""),
    "top_k": ("removed by top-k", "#b0b0b0", "x"),
    "top_p": ("removed by top-p", "#f39c34", "/"),
    "greedy": ("not the argmax (T = 0 is greedy)", "#b0b0b0", "x"),
}


def temperature_label(t: float) -> str:
    return "0 (greedy)" if t == 0 else f"{t:g}"


def nearest_temperature(t: float) -> float:
    """Snap any number (e.g. from a link) to the closest slider option. Clamped into the options'
    range first: beyond it every |o - t| rounds to the same float (1e308 - 3.0 == 1e308 - 0.0),
    and the first option, greedy, would win."""
    t = min(max(float(t), TEMPERATURES[0]), TEMPERATURES[-1])
    return min(TEMPERATURES, key=lambda o: abs(o - t))


def _np(t: torch.Tensor) -> list:
    return t.detach().cpu().tolist()  # lists: plotly validates them much faster than arrays


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def unique_labels(pieces: list[str], ids: list[int]) -> list[str]:
    """Escaped axis labels; two tokens with the same readable piece get their ids appended."""
    seen = {p: pieces.count(p) for p in pieces}
    return [esc(p if seen[p] == 1 else f"{p} #{i}") for p, i in zip(pieces, ids)]


def shown_ids(logits: torch.Tensor, count: int, must: int | None = None) -> list[int]:
    """The `count` most likely token ids, highest logit first (lowest id first on ties), plus
    `must` (e.g. the token actually drawn) when it is not among them."""
    order = torch.sort(logits.float(), descending=True, stable=True).indices
    top = order[:count].tolist()
    if must is not None and must not in top:
        top.append(must)
    return top


def _statuses(bd: Breakdown, ids: list[int]) -> list[str]:
    kept, kept_k = bd.kept[ids].tolist(), bd.kept_after_top_k[ids].tolist()
    if bd.settings.greedy:
        return ["kept" if k else "greedy" for k in kept]
    return ["kept" if k else ("top_p" if kk else "top_k") for k, kk in zip(kept, kept_k)]


def _nucleus_curve(bd: Breakdown, ids: list[int]) -> torch.Tensor:
    """Cumulative probability that top-p compares with p: the distribution after temperature,
    renormalised over what top-k kept (HF order), summed over every token ranked at or above
    each shown one (so a shown token far down the ranking still gets its true running total)."""
    p_k = torch.where(bd.kept_after_top_k, bd.probs_t, torch.zeros_like(bd.probs_t)).double()
    order = torch.sort(bd.probs, descending=True, stable=True).indices
    running = torch.empty_like(p_k)
    running[order] = torch.cumsum(p_k[order], 0) / p_k.sum()
    return running[ids]


def _hover(ids, pieces, bd: Breakdown, statuses) -> list[str]:
    p0, pt, pf = bd.probs[ids].tolist(), bd.probs_t[ids].tolist(), bd.final[ids].tolist()
    return [f"<b>{esc(pc)}</b> (id {i}), rank {r}<br>original p = {a:.6f}<br>after temperature p = {b:.6f}"
            f"<br>sampled with p = {c:.6f}<br>{STATUS[s][0]}"
            for r, (i, pc, a, b, c, s) in enumerate(zip(ids, pieces, p0, pt, pf, statuses))]


OUTLINE = dict(color="rgba(0,0,0,0)", line=dict(color="#222", width=1.5))


def next_token_figure(bd: Breakdown, ids: list[int], pieces: list[str], title: str,
                      chosen: int | None = None, xtitle: str = "next token (most likely first)") -> go.Figure:
    """Bars of the shown tokens after temperature, coloured by what top-k / top-p did, over
    outlines of the original probabilities; one bar sums every other token of the vocabulary.
    Built as plain dicts, unvalidated (tfm.viz.figure_dicts)."""
    labels = unique_labels(pieces, ids)
    statuses = _statuses(bd, ids)
    hover = _hover(ids, pieces, bd, statuses)
    traces = []
    for status, (name, colour, shape) in STATUS.items():
        sel = [j for j, s in enumerate(statuses) if s == status]
        if sel:
            traces.append(dict(type="bar", x=[labels[j] for j in sel], y=_np(bd.probs_t[[ids[j] for j in sel]]),
                               name=name, width=0.55, meta=status, customdata=[ids[j] for j in sel],
                               marker=dict(color=colour, pattern=dict(shape=shape, fgcolor="#444")),
                               hovertext=[hover[j] for j in sel], hoverinfo="text"))
    tail_traces = _tail(bd, ids)
    kept = [j for j, s in enumerate(statuses) if s == "kept"]
    traces += tail_traces + [
        dict(type="bar", x=labels, y=_np(bd.probs[ids]), name="original probability (T = 1)", width=0.85,
             marker=OUTLINE, hoverinfo="skip", meta="original"),
        dict(type="scatter", x=[labels[j] for j in kept], y=_np(bd.final[[ids[j] for j in kept]]), mode="markers",
             name="sampled with (renormalised)", marker=dict(symbol="diamond", size=9, color="#0b3d6b"),
             hoverinfo="skip", meta="final")]
    layout = dict(title=dict(text=title), barmode="overlay", height=500, hovermode="closest",
                  legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, font=dict(size=13)),
                  xaxis=dict(title=dict(text=xtitle), type="category", tickangle=-45, domain=[0, 0.82],
                             categoryorder="array", categoryarray=labels),
                  yaxis=dict(title=dict(text="probability"), rangemode="tozero", tickformat=".2~g"),
                  # the rest of the vocabulary gets its own panel: one huge bar would flatten the others
                  xaxis3=dict(domain=[0.9, 0.97], type="category", anchor="y3", tickangle=-45),
                  yaxis3=dict(anchor="x3", side="right", range=[0, 1.02], dtick=0.2, title=dict(text="summed p")),
                  margin=dict(t=110, b=10, r=70), font=dict(size=14), shapes=[], annotations=[])
    if not bd.settings.greedy:
        _nucleus(bd, ids, labels, traces, layout)
    if chosen is not None and chosen in ids:
        layout["annotations"].append(dict(x=labels[ids.index(chosen)], text="chosen", showarrow=True, arrowhead=2,
                                          y=max(float(bd.probs_t[chosen]), float(bd.probs[chosen])),
                                          ay=-30, font=dict(size=15, color="#c0392b")))
    return figure(traces, layout)


def _tail(bd: Breakdown, ids: list[int]) -> list[dict]:
    """One bar for every token not shown, so the chart always accounts for all the probability."""
    rest = torch.ones(bd.probs.shape[-1], dtype=torch.bool, device=bd.probs.device)
    rest[ids] = False
    n_rest, n_kept = int(rest.sum()), int((bd.kept & rest).sum())
    pt, p0, pf = (float(x[rest].sum()) for x in (bd.probs_t, bd.probs, bd.final))
    label = f"other {n_rest:,} tokens"
    text = (f"{n_rest:,} other tokens<br>original p = {p0:.6f}<br>after temperature p = {pt:.6f}"
            f"<br>{n_kept:,} of them kept, sampled with p = {pf:.6f}")
    return [
        dict(type="bar", x=[label], y=[pt], name="all other tokens (summed)", width=0.55, meta="tail",
             xaxis="x3", yaxis="y3",
             marker=dict(color="#dddddd", pattern=dict(shape=".", fgcolor="#777")),
             customdata=[[n_rest, n_kept]], hoverinfo="text", hovertext=[text]),
        dict(type="bar", x=[label], y=[p0], width=0.85, showlegend=False, hoverinfo="skip", meta="original_tail",
             marker=OUTLINE, xaxis="x3", yaxis="y3")]


def _nucleus(bd: Breakdown, ids: list[int], labels: list[str], traces: list, layout: dict) -> None:
    """Cumulative probability on a right axis, with the top-p threshold drawn across it."""
    p = bd.settings.top_p
    traces.append(dict(type="scatter", x=labels, y=_np(_nucleus_curve(bd, ids)), yaxis="y2", mode="lines+markers",
                       name="cumulative p (top-p counts this)", line=dict(color="#7b3294", width=2),
                       marker=dict(size=5), meta="cumulative", hovertemplate="cumulative p = %{y:.4f}<extra></extra>"))
    layout["yaxis2"] = dict(title=dict(text="cumulative p", standoff=4), overlaying="y", side="right",
                            range=[0, 1.05], tickmode="linear", tick0=0, dtick=0.2, showgrid=False)
    if p < 1:  # a plain shape: fig.add_hline is slow (docs/benchmarks.md)
        layout["shapes"].append(dict(type="line", xref="x domain", x0=0, x1=1, yref="y2", y0=p, y1=p,
                                     line=dict(color="#7b3294", dash="dash")))
        layout["annotations"].append(dict(xref="x domain", x=1, yref="y2", y=p, text=f"top-p = {p:g}",
                                          showarrow=False, xanchor="right", yanchor="bottom",
                                          font=dict(color="#7b3294")))


def attention_rows_figure(rows: np.ndarray, key_labels: list[str], title: str) -> go.Figure:
    """(L, H, S) attention of one query position: one heatmap row per (layer, head), a white
    line between layers."""
    n_layer, n_head, n_key = rows.shape
    z = rows.reshape(n_layer * n_head, n_key)
    y = [head_label(i, h) for i in range(n_layer) for h in range(n_head)]
    x = [esc(k) for k in key_labels]
    trace = dict(type="heatmap", z=z, x=x, y=y, colorscale="Blues", zmin=0, zmax=1,
                 colorbar=dict(title=dict(text="attention")),
                 hovertemplate="%{y} → key %{x}: %{z:.4f}<extra></extra>")
    lines = [dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=l * n_head - 0.5, y1=l * n_head - 0.5,
                  line=dict(color="white", width=3)) for l in range(1, n_layer)]
    return figure([trace], dict(
        title=dict(text=title), height=max(300, 90 + 17 * len(y)), font=dict(size=13), shapes=lines,
        xaxis=dict(title=dict(text="key position (token it looks at)"), type="category", tickangle=-45),
        yaxis=dict(title=dict(text="layer, head"), autorange="reversed", type="category", tickmode="array",
                   tickvals=y, ticktext=y, tickfont=dict(size=11 if len(y) > 24 else 13)),
        margin=dict(t=60, b=10)))


def step_attention_figure(attn: torch.Tensor, key_labels: list[str], window: int,
                          title: str) -> tuple[go.Figure, float | None]:
    """The (L, H, S) attention row of one query, last `window` keys; also the mean share (over
    heads) of attention on the keys left out, or None when all are shown."""
    lo = max(0, attn.shape[-1] - window)
    hidden = float(attn[:, :, :lo].sum(-1).mean()) if lo else None
    return attention_rows_figure(attn[:, :, lo:].numpy(), key_labels[lo:], title), hidden


def step_lens_figure(top_ids: torch.Tensor, top_probs: torch.Tensor, row_labels: list[str],
                     pieces: list[list[str]], chosen: int, title: str) -> go.Figure:
    """Logit lens of one position: per layer its 5 most likely next tokens, the drawn one bold."""
    hover = [[f"{esc(pc)}: p = {p:.4f}" for pc, p in zip(row, probs)] for row, probs in zip(pieces, top_probs.tolist())]
    cols = [f"choice {j + 1}" for j in range(top_ids.shape[1])]
    return lens_grid_figure(top_probs.numpy(), pieces, hover, row_labels, cols, title,
                            "the layer's most likely next tokens", bold=(top_ids == chosen).numpy(), ctitle="p")


def lens_grid_figure(probs: np.ndarray, pieces: list[list[str]], hover: list[list[str]], row_labels: list[str],
                     col_labels: list[str], title: str, xtitle: str, bold: np.ndarray | None = None,
                     ctitle: str = "top-1 p") -> go.Figure:
    """Logit-lens heatmap: rows are layers, cells show the top prediction and its probability.
    Many columns get smaller, shortened cell text (ending in …); the hover has every piece whole."""
    n_col = len(col_labels)
    size, room = (14, 12) if n_col <= 16 else (12, 7) if n_col <= 24 else (11, 5) if n_col <= 32 else (10, 3)
    text = [[_cell(p, room, bold is not None and bool(bold[r, c])) for c, p in enumerate(row)]
            for r, row in enumerate(pieces)]
    trace = dict(type="heatmap", z=probs, x=[esc(c) for c in col_labels], y=row_labels, text=text, xgap=1,
                 texttemplate="%{text}", textfont=dict(size=size), customdata=hover,
                 colorscale="Viridis", zmin=0, zmax=1, colorbar=dict(title=dict(text=ctitle)),
                 hovertemplate="%{y}, %{x}<br>%{customdata}<extra></extra>")
    return figure([trace], dict(
        title=dict(text=title), height=max(320, 90 + 38 * len(row_labels)), font=dict(size=13),
        xaxis=dict(title=dict(text=xtitle), type="category", tickangle=-45, side="bottom"),
        yaxis=dict(title=dict(text="layer (residual stream after it)"), type="category"),
        margin=dict(t=60, b=10)))


def _cell(piece: str, room: int, bold: bool) -> str:
    short = piece if len(piece) <= room else piece[:room - 1] + "…"
    return f"<b>{esc(short)}</b>" if bold else esc(short)


COMPARE_COLOURS = ("#1f6fb4", "#e4572e")  # left setting blue, right setting red-orange


def compare_figure(series: dict[str, np.ndarray], title: str, ytitle: str, log: bool = False) -> go.Figure:
    """One line per setting over generated steps (x = step number)."""
    fig = go.Figure()
    for (name, y), colour in zip(series.items(), COMPARE_COLOURS * 2):
        fig.add_scatter(x=np.arange(len(y)), y=y, mode="lines+markers", name=esc(name), meta=name,
                        line=dict(color=colour, width=2), marker=dict(size=6),
                        hovertemplate="step %{x}: %{y:.4g}<extra>" + esc(name) + "</extra>")
    fig.update_layout(title=title, height=340, font=dict(size=13), legend=dict(orientation="h", y=-0.25),
                      xaxis=dict(title="generated token number"),
                      yaxis=dict(title=ytitle, type="log" if log else "linear", tickformat="~g"),
                      margin=dict(t=50, b=10))
    return fig


def repeated_ngram_share(ids: list[int], n: int = 3) -> float:
    """Share of the text's n-grams that already occurred earlier in it (0 = no repetition)."""
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    seen, repeats = set(), 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams) if grams else 0.0


SHADES = ("#dbeafe", "#fde9c9")  # alternating token backgrounds, so token boundaries show


def text_html(prompt: str, records: list[StepRecord]) -> str:
    """The prompt in grey, then each generated token on alternating shades (hover: its
    probability and rank). Everything is escaped; newlines become <br> so the block stays one
    raw-HTML line that markdown leaves alone."""
    def clean(s: str) -> str:
        return esc(s).replace("\n", "<br>").replace("$", "&#36;")

    spans = "".join(
        f'<span style="background:{SHADES[r.index % 2]}" title="{esc(r.display)}: '
        f'p = {r.prob:.3f}, rank {r.rank}">{clean(r.new_text)}</span>' for r in records)
    return ('<div class="gen-text" style="white-space:pre-wrap;font-size:1.1rem;line-height:1.7;'
            'border:1px solid #ccc;border-radius:6px;padding:0.6rem;max-height:24rem;overflow-y:auto">'
            f'<span style="color:#6b6b6b">{clean(prompt)}</span>{spans}</div>')
