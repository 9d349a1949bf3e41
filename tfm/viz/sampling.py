"""Figures for next-token sampling: what temperature, top-k and top-p do to the next token's
distribution. Generation timelines live in `timeline`, the logit lens grid in `lens`; their names
are also reachable here, where the pages found them first.

Pure functions: tensors / numpy arrays and token pieces in, `go.Figure` (or plain data) out.
Token text is HTML-escaped (`labels.esc`), because plotly renders a subset of HTML in labels and hover.
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from ..generation.sampling import Breakdown
from .labels import esc, unique_labels
from .lens import lens_grid_figure, step_lens_figure
from .figure_dicts import figure
from .timeline import attention_rows_figure, compare_figure, repeated_ngram_share, step_attention_figure, text_html

__all__ = [
    "STATUS",
    "TEMPERATURES",
    "attention_rows_figure",
    "compare_figure",
    "esc",
    "lens_grid_figure",
    "nearest_temperature",
    "next_token_figure",
    "repeated_ngram_share",
    "shown_ids",
    "step_attention_figure",
    "step_lens_figure",
    "temperature_label",
    "text_html",
    "unique_labels",
]

# Temperatures a slider offers: fine steps near 0, where small changes matter most.
TEMPERATURES = (
    0.0,
    0.01,
    0.05,
    0.1,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.1,
    1.2,
    1.3,
    1.4,
    1.5,
    1.6,
    1.7,
    1.8,
    1.9,
    2.0,
    2.5,
    3.0,
)
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
    return [
        f"<b>{esc(pc)}</b> (id {i}), rank {r}<br>original p = {a:.6f}<br>after temperature p = {b:.6f}"
        f"<br>sampled with p = {c:.6f}<br>{STATUS[s][0]}"
        for r, (i, pc, a, b, c, s) in enumerate(zip(ids, pieces, p0, pt, pf, statuses))
    ]


OUTLINE = dict(color="rgba(0,0,0,0)", line=dict(color="#222", width=1.5))


def next_token_figure(
    bd: Breakdown,
    ids: list[int],
    pieces: list[str],
    title: str,
    chosen: int | None = None,
    xtitle: str = "next token (most likely first)",
) -> go.Figure:
    """Bars of the shown tokens after temperature, coloured by what top-k / top-p did, over
    outlines of the original probabilities; one bar sums every other token of the vocabulary.
    Built as plain dicts, unvalidated (tfm.viz.figure_dicts)."""
    labels = unique_labels(pieces, ids)
    statuses = _statuses(bd, ids)
    hover = _hover(ids, pieces, bd, statuses)
    traces = _status_bars(bd, ids, labels, statuses, hover) + _tail(bd, ids)
    traces += _original_and_final(bd, ids, labels, statuses)
    layout = _next_token_layout(title, xtitle, labels)
    if not bd.settings.greedy:
        _nucleus(bd, ids, labels, traces, layout)
    if chosen is not None and chosen in ids:
        layout["annotations"].append(
            dict(
                x=labels[ids.index(chosen)],
                text="chosen",
                showarrow=True,
                arrowhead=2,
                y=max(float(bd.probs_t[chosen]), float(bd.probs[chosen])),
                ay=-30,
                font=dict(size=15, color="#c0392b"),
            )
        )
    return figure(traces, layout)


def _status_bars(bd: Breakdown, ids: list[int], labels: list[str], statuses: list[str], hover: list[str]) -> list[dict]:
    """The shown tokens' probabilities after temperature: one bar trace per status (kept, removed by
    top-k, by top-p, by greedy), each with its colour and pattern."""
    traces = []
    for status, (name, colour, shape) in STATUS.items():
        sel = [j for j, s in enumerate(statuses) if s == status]
        if sel:
            traces.append(
                dict(
                    type="bar",
                    x=[labels[j] for j in sel],
                    y=_np(bd.probs_t[[ids[j] for j in sel]]),
                    name=name,
                    width=0.55,
                    meta=status,
                    customdata=[ids[j] for j in sel],
                    marker=dict(color=colour, pattern=dict(shape=shape, fgcolor="#444")),
                    hovertext=[hover[j] for j in sel],
                    hoverinfo="text",
                )
            )
    return traces


def _original_and_final(bd: Breakdown, ids: list[int], labels: list[str], statuses: list[str]) -> list[dict]:
    """Outlines of the original probabilities (T = 1), and a diamond at each kept token's
    renormalised probability, the one sampling uses."""
    kept = [j for j, s in enumerate(statuses) if s == "kept"]
    return [
        dict(
            type="bar",
            x=labels,
            y=_np(bd.probs[ids]),
            name="original probability (T = 1)",
            width=0.85,
            marker=OUTLINE,
            hoverinfo="skip",
            meta="original",
        ),
        dict(
            type="scatter",
            x=[labels[j] for j in kept],
            y=_np(bd.final[[ids[j] for j in kept]]),
            mode="markers",
            name="sampled with (renormalised)",
            marker=dict(symbol="diamond", size=9, color="#0b3d6b"),
            hoverinfo="skip",
            meta="final",
        ),
    ]


def next_token_title(shown: int, vocab: int, temperature: float, top_k: int, top_p: float) -> str:
    """The next-token chart's title: short lines, so a phone (390 px) shows it whole."""
    return (
        f"Next-token probabilities<br><sup>top {shown} of {vocab:,} tokens<br>T = {temperature_label(temperature)} · "
        f"top-k {top_k or 'off'} · top-p {top_p:g}</sup>"
    )


def _next_token_layout(title: str, xtitle: str, labels: list[str]) -> dict:
    # the legend below everything (container-referenced: it reserves its own room under the axes'
    # labels), not on the title, where it lands when a phone wraps it to five rows
    return dict(
        title=dict(text=title),
        barmode="overlay",
        height=540,
        hovermode="closest",
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, font=dict(size=13)),
        xaxis=dict(
            title=dict(text=xtitle),
            type="category",
            tickangle=-45,
            domain=[0, 0.82],
            categoryorder="array",
            categoryarray=labels,
        ),
        yaxis=dict(title=dict(text="probability"), rangemode="tozero", tickformat=".2~g"),
        # the rest of the vocabulary gets its own panel: one huge bar would flatten the others
        xaxis3=dict(domain=[0.9, 0.97], type="category", anchor="y3", tickangle=0),
        yaxis3=dict(anchor="x3", side="right", range=[0, 1.02], dtick=0.2, title=dict(text="summed p")),
        margin=dict(t=90, b=10, r=70),
        font=dict(size=14),
        shapes=[],
        annotations=[],
    )


def _tail(bd: Breakdown, ids: list[int]) -> list[dict]:
    """One bar for every token not shown, so the chart always accounts for all the probability."""
    rest = torch.ones(bd.probs.shape[-1], dtype=torch.bool, device=bd.probs.device)
    rest[ids] = False
    n_rest, n_kept = int(rest.sum()), int((bd.kept & rest).sum())
    pt, p0, pf = (float(x[rest].sum()) for x in (bd.probs_t, bd.probs, bd.final))
    label, text = f"other<br>{n_rest:,}", _tail_hover(n_rest, n_kept, p0, pt, pf)  # upright, under its bar
    return [
        dict(
            type="bar",
            x=[label],
            y=[pt],
            name="all other tokens (summed)",
            width=0.55,
            meta="tail",
            xaxis="x3",
            yaxis="y3",
            marker=dict(color="#dddddd", pattern=dict(shape=".", fgcolor="#777")),
            customdata=[[n_rest, n_kept]],
            hoverinfo="text",
            hovertext=[text],
        ),
        dict(
            type="bar",
            x=[label],
            y=[p0],
            width=0.85,
            showlegend=False,
            hoverinfo="skip",
            meta="original_tail",
            marker=OUTLINE,
            xaxis="x3",
            yaxis="y3",
        ),
    ]


def _tail_hover(n_rest: int, n_kept: int, p0: float, pt: float, pf: float) -> str:
    return (
        f"{n_rest:,} other tokens<br>original p = {p0:.6f}<br>after temperature p = {pt:.6f}"
        f"<br>{n_kept:,} of them kept, sampled with p = {pf:.6f}"
    )


def _nucleus(bd: Breakdown, ids: list[int], labels: list[str], traces: list, layout: dict) -> None:
    """Cumulative probability on a right axis, with the top-p threshold drawn across it."""
    p = bd.settings.top_p
    traces.append(
        dict(
            type="scatter",
            x=labels,
            y=_np(_nucleus_curve(bd, ids)),
            yaxis="y2",
            mode="lines+markers",
            name="cumulative p (top-p counts this)",
            line=dict(color="#7b3294", width=2),
            marker=dict(size=5),
            meta="cumulative",
            hovertemplate="cumulative p = %{y:.4f}<extra></extra>",
        )
    )
    layout["yaxis2"] = dict(
        title=dict(text="cumulative p", standoff=4),
        overlaying="y",
        side="right",
        range=[0, 1.05],
        tickmode="linear",
        tick0=0,
        dtick=0.2,
        showgrid=False,
    )
    if p < 1:  # a plain shape: fig.add_hline is slow (docs/benchmarks.md)
        _top_p_line(p, layout)


def _top_p_line(p: float, layout: dict) -> None:
    """The top-p threshold: a dashed line across the cumulative axis, labelled at its right end."""
    layout["shapes"].append(
        dict(type="line", xref="x domain", x0=0, x1=1, yref="y2", y0=p, y1=p, line=dict(color="#7b3294", dash="dash"))
    )
    layout["annotations"].append(
        dict(
            xref="x domain",
            x=1,
            yref="y2",
            y=p,
            text=f"top-p = {p:g}",
            showarrow=False,
            xanchor="right",
            yanchor="bottom",
            font=dict(color="#7b3294"),
        )
    )
