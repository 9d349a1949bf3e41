"""Figures for the quantization page: one block decoded, KL per position, and one head's attention
before and after re-quantizing, side by side (pure functions of tfm.analysis.quant.requantize results)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.quant.requantize import BlockView, QuantEffect, QuantTable
from .attention import COLORSCALE, MASKED_BG, plotly_text


def table_frame(table: QuantTable) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "tensor": [r.name for r in table.rows],
            "shape": [" × ".join(map(str, r.shape)) for r in table.rows],
            "type": [r.qtype for r in table.rows],
            "bits per weight": [round(r.bits_per_weight, 3) for r in table.rows],
            "weights": [r.n_weights for r in table.rows],
            "stored KiB": [round(r.nbytes / 1024, 1) for r in table.rows],
        }
    )


def types_frame(table: QuantTable) -> pd.DataFrame:
    rows = sorted(table.by_type().items(), key=lambda kv: -kv[1][2])
    return pd.DataFrame(
        {
            "type": [t for t, _ in rows],
            "tensors": [n for _, (n, _, _) in rows],
            "weights": [w for _, (_, w, _) in rows],
            "bits per weight": [round(8 * b / max(1, w), 3) for _, (_, w, b) in rows],
            "stored MiB": [round(b / 2**20, 2) for _, (_, _, b) in rows],
        }
    )


def block_frame(bv: BlockView) -> pd.DataFrame:
    extra = {} if bv.sub_scale is None else {"d·sc_j": bv.sub_scale}
    extra |= {} if bv.sub_min is None else {"dmin·m_j": bv.sub_min}
    return pd.DataFrame(
        {
            "j": np.arange(len(bv.ints)),
            "stored q": bv.ints,
            **extra,
            "x decoded here": bv.values,
            "gguf.quants.dequantize": bv.dequantized,
        }
    )


def block_figure(bv: BlockView) -> go.Figure:
    """The block's 32 floats as bars, each labelled with the integer stored for it."""
    j = np.arange(len(bv.values))
    labels = [str(int(q)) for q in bv.ints] if len(bv.ints) <= 64 else None  # a K-quant's 256: hover only
    fig = go.Figure(
        go.Bar(
            x=j,
            y=bv.values,
            text=labels,
            textposition="outside",
            marker_color="#4f46e5",
            customdata=np.stack([bv.ints, bv.dequantized], axis=1),
            hovertemplate="j = %{x}<br>stored q = %{customdata[0]}<br>x = %{y:.6g}"
            "<br>gguf dequantize: %{customdata[1]:.6g}<extra></extra>",
        )
    )
    if bv.minimum is not None and bv.sub_min is None:
        fig.add_hline(
            y=bv.minimum,
            line_dash="dot",
            line_color="#b91c1c",
            annotation_text=f"m = {bv.minimum:.5g} (q = 0)",
            annotation_position="bottom right",
        )
    fig.update_layout(
        title=f"{plotly_text(bv.tensor)}, row {bv.row}, block {bv.block} ({bv.qtype}): "
        f"{bv.formula}, d = {bv.scale:.5g}",
        xaxis_title="position j in the block (label: the stored integer q)",
        yaxis_title="the weight x it stands for",
        height=420,
        margin=dict(t=70),
    )
    return fig


def kl_figure(effect: QuantEffect, labels: list[str], qtype: str) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=list(range(len(effect.kl))),
            y=effect.kl,
            marker_color="#b45309",
            customdata=[plotly_text(s) for s in labels],
            hovertemplate="after %{customdata}<br>KL = %{y:.4f} nats<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"How far the next-token distribution moved at each position (KL, original ‖ {qtype})",
        xaxis=dict(
            title="position (the token the prediction follows)",
            tickmode="array",
            tickvals=list(range(len(labels))),
            ticktext=[plotly_text(s) for s in labels],
        ),
        yaxis_title="KL divergence (nats)",
        height=380,
    )
    return fig


def top_frame(effect: QuantEffect, pieces: list[str], qtype: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "token": pieces,
            "p original": effect.p_original,
            f"p {qtype}": effect.p_requantized,
            "rank original": effect.rank_original + 1,
            f"rank {qtype}": effect.rank_requantized + 1,
        }
    )


def patterns_figure(effect: QuantEffect, labels: list[str], qtype: str) -> go.Figure:
    """Original, re-quantized and their difference for one head (keys after the query grey)."""
    t = effect.pattern_original.shape[0]
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    a, b = (np.where(mask, np.nan, m) for m in (effect.pattern_original, effect.pattern_requantized))
    diff = b - a
    lim = float(np.nanmax(np.abs(diff))) if t else 0.0
    ticks = [plotly_text(s) for s in labels]
    fig = make_subplots(
        1,
        3,
        horizontal_spacing=0.09,
        shared_yaxes=True,
        subplot_titles=("original", f"re-quantized to {qtype}", f"difference (largest {lim:.3g})"),
    )
    for col, (z, scale, zmin, zmax, bar_x) in enumerate(
        [
            (a, COLORSCALE, 0, 1, None),
            (b, COLORSCALE, 0, 1, 0.645),
            (diff, "RdBu_r", -max(lim, 1e-9), max(lim, 1e-9), 1.0),
        ]
    ):
        fig.add_trace(_pattern_panel(z, ticks, scale, zmin, zmax, bar_x, col), 1, col + 1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(
        title=f"Layer {effect.layer}, head {effect.head}: attention before and after re-quantizing",
        height=460,
        plot_bgcolor=MASKED_BG,
        margin=dict(t=90),
    )
    return fig


def _pattern_panel(
    z: np.ndarray, ticks: list[str], scale, zmin: float, zmax: float, bar_x: float | None, col: int
) -> go.Heatmap:
    """One panel's heatmap; one colour bar for both patterns, in the gap before the difference (its
    y axis is shared, unlabelled), and one for the difference."""
    bar = dict(x=bar_x, len=0.9, thickness=12, title="weight" if col == 1 else "after − before")
    return go.Heatmap(
        z=z,
        x=ticks,
        y=ticks,
        colorscale=scale,
        zmin=zmin,
        zmax=zmax,
        hovertemplate="query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>",
        showscale=bar_x is not None,
        colorbar=bar if bar_x else None,
    )
