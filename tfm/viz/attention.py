"""Figures and tables for the Attention page: pure functions of attention tensors and labels.

Every matrix drawn here is a slice of the engine's `blocks.{i}.attn.pattern` (or a reduction
of it the caller chose); masked cells (a key after its query) become NaN so they are drawn
as grey gaps, never as a 0-valued colour.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from ..analysis.heads import HeadTable
from ..core.trace_names import head_label
from .export import export_npz  # noqa: F401 (the Attention page's download, reached from here)
from .figure_dicts import figure

MASKED_BG = "#c8c8c8"  # the plot background shows through NaN (masked) cells
# plotly's (python) sequential Blues, white to navy, spelled out: figures skip validation, and
# plotly.js reads the name "Blues" as a different, reversed scale.
COLORSCALE = [
    [i / 8, c]
    for i, c in enumerate(
        [
            "rgb(247,251,255)",
            "rgb(222,235,247)",
            "rgb(198,219,239)",
            "rgb(158,202,225)",
            "rgb(107,174,214)",
            "rgb(66,146,198)",
            "rgb(33,113,181)",
            "rgb(8,81,156)",
            "rgb(8,48,107)",
        ]
    )
]
WINDOW = 64  # most positions an attention figure draws at once: beyond this labels are unreadable, charts
# slow, and a head view's lines grow as T² (the Attention page, the timeline's keys, the notebook figures)
LOG_FLOOR = -4.0  # log10 colour scale: weights below 1e-4 get the lightest colour
HEAD_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def plotly_text(s: str) -> str:
    """Token text for plotly: it reads <tags> and &entities;, so escape them (quotes are safe
    there and plotly would print &quot; literally)."""
    return html.escape(s, quote=False)


# ---- numbers ------------------------------------------------------------------------------
def reduce_heads(layer_pattern: torch.Tensor, mode: str, head: int) -> torch.Tensor:
    """(H, T, T) -> (T, T): one head, or the mean / max over the heads of the layer."""
    if mode == "mean":
        return layer_pattern.mean(0)
    if mode == "max":
        return layer_pattern.amax(0)
    return layer_pattern[head]


def window(m: torch.Tensor, a: int, b: int, hide_first: bool = False, causal: bool = True) -> np.ndarray:
    """Rows and columns a..b (absolute positions) of (..., T, T) attention, float32, NaN where
    the key comes after the query (`causal`; an encoder's every key is visible). `hide_first` drops key 0 and renormalises every row over
    the remaining keys (rows sum to 1 again), to look past the attention sink; needs a >= 1."""
    return window_rows(m[..., a : b + 1, : b + 1], a, b, hide_first, causal=causal)


def window_rows(
    rows: torch.Tensor, a: int, b: int, hide_first: bool = False, sliding: int | None = None, causal: bool = True
) -> np.ndarray:
    """`window` from just the rows a..b over keys 0..b, (..., b - a + 1, b + 1): all the window
    needs (keys after b are masked for these queries), e.g. from `tfm.analysis.attention_rows`.
    `sliding`: a local layer's window; keys left of it are NaN (masked) too."""
    rows = rows.float()
    off = 0
    if hide_first:
        if a < 1:
            raise ValueError("hiding the first token needs the window to start at position 1 or later")
        rows, off = rows[..., 1:], 1
        rows = rows / rows.sum(-1, keepdim=True)
    out = rows[..., a - off : b + 1 - off].numpy().astype(np.float32, copy=True)
    w = b - a + 1
    if causal:
        out[..., np.triu(np.ones((w, w), dtype=bool), 1)] = np.nan
    if sliding is not None:  # query a + i reads keys a + i - sliding + 1 .. a + i
        out[..., np.tril(np.ones((w, w), dtype=bool), -sliding)] = np.nan
    return out


def _colour(z: np.ndarray, log: bool, zmax: float = 1.0) -> tuple[np.ndarray, dict]:
    """Values for the colour axis and the matching heatmap keyword arguments."""
    if not log:
        return z, dict(zmin=0.0, zmax=zmax, colorbar=dict(title=dict(text="weight")))
    with np.errstate(divide="ignore"):
        lz = np.log10(np.clip(z, 1e-12, None)).astype(np.float32)
    ticks = np.arange(LOG_FLOOR, 0.5).tolist()
    bar = dict(title=dict(text="weight (log)"), tickvals=ticks, ticktext=[f"{10**t:g}" for t in ticks])
    return lz, dict(zmin=LOG_FLOOR, zmax=0.0, colorbar=bar, customdata=z)


# ---- figures --------------------------------------------------------------------------------
def heatmap(
    z: np.ndarray, labels: list[str], title: str, log: bool = False, value: str = "weight", zmax: float = 1.0
) -> go.Figure:
    """One (query x key) attention matrix with token labels on both axes; the linear colour
    scale runs from 0 to `zmax` (less than 1 for a window whose rows spread over earlier keys)."""
    lab = [plotly_text(s) for s in labels]
    cz, kw = _colour(z, log, zmax)
    shown = "%{customdata:.4g}" if log else "%{z:.4f}"
    n = len(labels)
    font = dict(size=12 if n <= 40 else 10)
    trace = dict(
        type="heatmap",
        z=cz,
        x=lab,
        y=lab,
        colorscale=COLORSCALE,
        hoverongaps=False,
        **kw,
        hovertemplate=f"query: %{{y}}<br>key: %{{x}}<br>{value}: {shown}<extra></extra>",
    )
    return figure(
        [trace],
        dict(
            title=dict(text=title),
            plot_bgcolor=MASKED_BG,
            height=int(np.clip(18 * n + 240, 450, 1300)),
            margin=dict(l=10, r=10, t=60, b=10),
            xaxis=dict(title=dict(text="key: the token looked at"), tickangle=-60, showgrid=False, tickfont=font),
            yaxis=dict(
                title=dict(text="query: the token looking"), autorange="reversed", showgrid=False, tickfont=font
            ),
        ),
    )


def model_view(cells: np.ndarray, labels: list[str], title: str, log: bool = False) -> go.Figure:
    """(L, H, w, w) patterns as one grid image: rows are layers, columns heads. One heatmap trace
    (not L*H subplots) keeps it quick; a one-cell grey gap and an outline separate the cells."""
    n_layer, n_head, w, _ = cells.shape
    step = w + 1
    big = np.full((n_layer * step - 1, n_head * step - 1), np.nan, dtype=np.float32)
    for layer in range(n_layer):
        for head in range(n_head):
            big[layer * step : layer * step + w, head * step : head * step + w] = cells[layer, head]
    lab = [plotly_text(s) for s in labels]
    # Unique category names: the hover shows them; gap rows/columns get distinct blank names.
    xs = [s for h in range(n_head) for s in [f"H{h} key {t}" for t in lab] + [" " * (h + 1)]][:-1]
    ys = [s for l in range(n_layer) for s in [f"L{l} query {t}" for t in lab] + ["\u2009" * (l + 1)]][:-1]
    cz, kw = _colour(big, log)
    shown = "%{customdata:.4g}" if log else "%{z:.4f}"
    trace = dict(
        type="heatmap",
        z=cz,
        x=xs,
        y=ys,
        colorscale=COLORSCALE,
        hoverongaps=False,
        **kw,
        hovertemplate=f"%{{y}}<br>%{{x}}<br>weight: {shown}<extra></extra>",
    )
    return figure([trace], _grid_layout(title, xs, ys, n_layer, n_head, w))


def _grid_layout(title: str, xs: list[str], ys: list[str], n_layer: int, n_head: int, w: int) -> dict:
    """Ticks at the middle of each cell ("head h", "layer l") and an outline around each cell."""
    step, mid = w + 1, w // 2
    return dict(
        title=dict(text=title),
        plot_bgcolor=MASKED_BG,
        height=int(np.clip(120 * n_layer + 160, 400, 1400)),
        margin=dict(l=10, r=10, t=80, b=10),
        xaxis=dict(
            side="top",
            tickmode="array",
            showgrid=False,
            tickvals=[xs[h * step + mid] for h in range(n_head)],
            ticktext=[f"head {h}" for h in range(n_head)],
        ),
        yaxis=dict(
            autorange="reversed",
            tickmode="array",
            showgrid=False,
            tickvals=[ys[l * step + mid] for l in range(n_layer)],
            ticktext=[f"layer {l}" for l in range(n_layer)],
        ),
        shapes=[
            dict(
                type="rect",
                x0=h * step - 0.5,
                x1=h * step + w - 0.5,
                y0=l * step - 0.5,
                y1=l * step + w - 0.5,
                line=dict(color="#555", width=1),
            )
            for l in range(n_layer)
            for h in range(n_head)
        ],
    )


def head_view(
    cells: np.ndarray, heads: list[int], labels: list[str], title: str, token: int | None = None
) -> go.Figure:
    """BertViz-style lines from query tokens (left) to key tokens (right), opacity = weight.

    `cells` is (H, w, w) for one layer (NaN = masked); `token` (a row index) keeps only the
    lines from that query. Opacity is drawn in steps of 0.05 (weights under 0.025 are not
    drawn); with one token chosen, hovering a line's midpoint shows its exact weight."""
    w = cells.shape[-1]
    rows = np.arange(w) if token is None else np.array([token])
    data: list[dict] = []
    for i, head in enumerate(heads):
        colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
        q, k = np.nonzero(~np.isnan(cells[head][rows]))
        q = rows[q]
        wts = cells[head, q, k]
        data += _lines(q, k, wts, colour, f"head {head}")
        if token is not None:
            data.append(
                dict(
                    type="scatter",
                    x=np.full(len(k), 0.5 + 0.04 * (i - (len(heads) - 1) / 2)),
                    y=-(q + k) / 2,
                    mode="markers",
                    marker=dict(size=9, color=colour, opacity=0.0),
                    name=f"head {head} weights",
                    showlegend=False,
                    customdata=np.stack([k, wts], 1),
                    text=[plotly_text(labels[j]) for j in k],
                    hovertemplate=f"head {head}<br>key: %{{text}}<br>weight: %{{customdata[1]:.4f}}<extra></extra>",
                )
            )
    lab = [plotly_text(s) for s in labels]
    bold = [f"<b>{s}</b>" if j == token else s for j, s in enumerate(lab)]
    return head_view_frame(data, bold, lab, title)


def head_view_frame(data: list[dict], left: list[str], right: list[str], title: str) -> go.Figure:
    """A head view's two token columns (queries left, keys right; plotly-safe text) around its lines."""
    n = max(len(left), len(right))
    for x, text, pos in ((0, left, "middle left"), (1, right, "middle right")):
        data.append(
            dict(
                type="scatter",
                x=np.full(len(text), x),
                y=-np.arange(len(text)),
                mode="text",
                text=text,
                textposition=pos,
                textfont=dict(size=13),
                hoverinfo="skip",
                showlegend=False,
            )
        )
    return figure(
        data,
        dict(
            title=dict(text=title),
            height=int(np.clip(20 * n + 160, 360, 1500)),
            plot_bgcolor="white",
            margin=dict(l=10, r=10, t=90, b=10),
            legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0.5, xanchor="center"),
            xaxis=dict(range=[-0.9, 1.9], visible=False),
            yaxis=dict(range=[-n + 0.3, 0.9], visible=False),
            annotations=[
                dict(x=0, y=0.8, text="<b>query</b> (looking)", showarrow=False, xanchor="right"),
                dict(x=1, y=0.8, text="<b>key</b> (looked at)", showarrow=False, xanchor="left"),
            ],
        ),
    )


def _lines(q: np.ndarray, k: np.ndarray, wts: np.ndarray, colour: str, name: str) -> list[dict]:
    """A legend entry, then one trace per opacity step (plotly has one opacity per trace);
    NaN between segments breaks the line."""
    level = np.round(wts * 20).astype(int)
    out = [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="lines",
            line=dict(color=colour, width=3),
            name=name,
            legendgroup=name,
        )
    ]
    for lv in np.unique(level[level > 0]):
        sel = level == lv
        n = int(sel.sum())
        xs = np.tile(np.array([0.02, 0.98, np.nan]), n)
        ys = np.stack([-q[sel], -k[sel], np.full(n, np.nan)], 1).ravel().astype(float)
        out.append(
            dict(
                type="scatter",
                x=xs,
                y=ys,
                mode="lines",
                opacity=lv / 20,
                line=dict(color=colour, width=2),
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
            )
        )
    return out


# ---- head table and export -----------------------------------------------------------------
def head_table(heads: HeadTable) -> pd.DataFrame:
    """One row per head, ordered by (layer, head): every score of `analysis.head_table`."""
    n_layer, n_head = next(iter(heads.scores.values())).shape
    table = {
        "head": [head_label(l, h) for l in range(n_layer) for h in range(n_head)],
        "layer": np.repeat(np.arange(n_layer), n_head),
        "index": np.tile(np.arange(n_head), n_layer),
    }
    for name, score in heads.scores.items():
        table[name] = score.flatten().numpy()
    return pd.DataFrame(table)


def window_scale(shown: np.ndarray) -> tuple[float, float]:
    """(largest weight shown, mean share of each row's attention inside the window). On a long
    prompt a window's rows may spend most attention on earlier keys: a 0..1 scale would be blank."""
    top = float(np.nanmax(shown)) if np.isfinite(shown).any() else 1.0
    return max(top, 1e-6), float(np.nanmean(np.nansum(shown, axis=-1)))


def window_reach(row: np.ndarray, window: int, title: str) -> go.Figure:
    """One query's weights over every key up to it (`row`: keys 0..q), keys left of a local layer's
    `window` shaded: a sliding window wider than the square view still shows where it ends."""
    q = len(row) - 1
    first = max(0, q - window + 1)
    fig = go.Figure(
        go.Bar(
            x=np.arange(q + 1),
            y=row,
            marker_color="#1f77b4",
            marker_line_width=0,
            hovertemplate="key %{x}: weight %{y:.4g}<extra></extra>",
        )
    )
    if first > 0:
        fig.add_vrect(x0=-0.5, x1=first - 0.5, fillcolor="lightgrey", opacity=0.6, line_width=0)
        fig.add_annotation(
            x=(first - 1) / 2,
            y=1,
            yref="paper",
            showarrow=False,
            yanchor="bottom",
            text=f"keys 0–{first - 1}: outside the {window}-key window (masked, weight 0)",
        )
    fig.update_layout(
        title=title, xaxis_title="key position", yaxis_title="attention weight", height=320, bargap=0, margin=dict(t=70)
    )
    return fig
