"""Figures for a generation timeline: each step's attention, the same settings compared over the
steps, and the generated text on alternating shades. Token text is HTML-escaped here."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from ..core.trace_names import head_label
from ..generation.timeline import StepRecord
from .labels import esc
from .figure_dicts import figure


def attention_rows_figure(rows: np.ndarray, key_labels: list[str], title: str) -> go.Figure:
    """(L, H, S) attention of one query position: one heatmap row per (layer, head), a white
    line between layers."""
    n_layer, n_head, n_key = rows.shape
    z = rows.reshape(n_layer * n_head, n_key)
    y = [head_label(i, h) for i in range(n_layer) for h in range(n_head)]
    x = [esc(k) for k in key_labels]
    trace = dict(
        type="heatmap",
        z=z,
        x=x,
        y=y,
        colorscale="Blues",
        zmin=0,
        zmax=1,
        colorbar=dict(title=dict(text="attention")),
        hovertemplate="%{y} → key %{x}: %{z:.4f}<extra></extra>",
    )
    return figure([trace], _rows_layout(y, n_layer, n_head, title))


def _rows_layout(y: list[str], n_layer: int, n_head: int, title: str) -> dict:
    """One row label per (layer, head), a white line between layers."""
    lines = [
        dict(
            type="line",
            xref="x domain",
            x0=0,
            x1=1,
            yref="y",
            y0=l * n_head - 0.5,
            y1=l * n_head - 0.5,
            line=dict(color="white", width=3),
        )
        for l in range(1, n_layer)
    ]
    return dict(
        title=dict(text=title),
        height=max(300, 90 + 17 * len(y)),
        font=dict(size=13),
        shapes=lines,
        xaxis=dict(title=dict(text="key position (token it looks at)"), type="category", tickangle=-45),
        yaxis=dict(
            title=dict(text="layer, head"),
            autorange="reversed",
            type="category",
            tickmode="array",
            tickvals=y,
            ticktext=y,
            tickfont=dict(size=11 if len(y) > 24 else 13),
        ),
        margin=dict(t=60, b=10),
    )


def step_attention_figure(
    attn: torch.Tensor, key_labels: list[str], window: int, title: str
) -> tuple[go.Figure, float | None]:
    """The (L, H, S) attention row of one query, last `window` keys; also the mean share (over
    heads) of attention on the keys left out, or None when all are shown."""
    lo = max(0, attn.shape[-1] - window)
    hidden = float(attn[:, :, :lo].sum(-1).mean()) if lo else None
    return attention_rows_figure(attn[:, :, lo:].numpy(), key_labels[lo:], title), hidden


COMPARE_COLOURS = ("#1f6fb4", "#e4572e")  # left setting blue, right setting red-orange


def compare_figure(series: dict[str, np.ndarray], title: str, ytitle: str, log: bool = False) -> go.Figure:
    """One line per setting over generated steps (x = step number)."""
    fig = go.Figure()
    for (name, y), colour in zip(series.items(), COMPARE_COLOURS * 2):
        fig.add_scatter(
            x=np.arange(len(y)),
            y=y,
            mode="lines+markers",
            name=esc(name),
            meta=name,
            line=dict(color=colour, width=2),
            marker=dict(size=6),
            hovertemplate="step %{x}: %{y:.4g}<extra>" + esc(name) + "</extra>",
        )
    fig.update_layout(
        title=title,
        height=340,
        font=dict(size=13),
        legend=dict(orientation="h", y=-0.25),
        xaxis=dict(title="generated token number"),
        yaxis=dict(title=ytitle, type="log" if log else "linear", tickformat="~g"),
        margin=dict(t=50, b=10),
    )
    return fig


def repeated_ngram_share(ids: list[int], n: int = 3) -> float:
    """Share of the text's n-grams that already occurred earlier in it (0 = no repetition)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
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
        f'p = {r.prob:.3f}, rank {r.rank}">{clean(r.new_text)}</span>'
        for r in records
    )
    return (
        '<div class="gen-text" style="white-space:pre-wrap;font-size:1.1rem;line-height:1.7;'
        'border:1px solid #ccc;border-radius:6px;padding:0.6rem;max-height:24rem;overflow-y:auto">'
        f'<span style="color:#6b6b6b">{clean(prompt)}</span>{spans}</div>'
    )
