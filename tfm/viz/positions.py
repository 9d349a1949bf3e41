"""Plotly figures for the positional-encoding page: tensors in, go.Figure out."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

HEAT = dict(colorscale="RdBu_r", zmid=0)


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def position_heatmap(table, title: str) -> go.Figure:
    """(T, D) positional vectors: one row per position, one column per dimension."""
    z = _np(table)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            **HEAT,
            colorbar=dict(title="value"),
            hovertemplate="position %{y}, dim %{x}<br>value %{z:.5f}<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="dimension", yaxis_title="position", height=420)
    fig.update_yaxes(autorange="reversed")
    return fig


def similarity_heatmap(sim, title: str) -> go.Figure:
    """(T, T) cosine similarity between positions."""
    fig = go.Figure(
        go.Heatmap(
            z=_np(sim),
            colorscale="Viridis",
            zmin=-1,
            zmax=1,
            colorbar=dict(title="cosine"),
            hovertemplate="position %{y} vs %{x}<br>cosine %{z:.4f}<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="position", yaxis_title="position", height=420)
    fig.update_yaxes(autorange="reversed", scaleanchor="x")
    return fig


def pca_scatter(coords, share, title: str) -> go.Figure:
    """Positions projected on two principal components, coloured by position, joined in order."""
    xy, pos = _np(coords), np.arange(len(coords))
    fig = go.Figure(
        [
            go.Scatter(
                x=xy[:, 0],
                y=xy[:, 1],
                mode="lines",
                line=dict(color="lightgrey", width=1),
                hoverinfo="skip",
                showlegend=False,
            ),
            go.Scatter(
                x=xy[:, 0],
                y=xy[:, 1],
                mode="markers",
                customdata=pos,
                showlegend=False,
                marker=dict(color=pos, colorscale="Plasma", size=7, colorbar=dict(title="position")),
                hovertemplate="position %{customdata}<br>PC1 %{x:.4f}<br>PC2 %{y:.4f}<extra></extra>",
            ),
        ]
    )
    s = _np(share)
    fig.update_layout(
        title=title,
        height=420,
        xaxis_title=f"PC1 ({100 * s[0]:.1f}% of variance)",
        yaxis_title=f"PC2 ({100 * s[1]:.1f}% of variance)",
    )
    return fig


def waves(table, dims: list[int], title: str) -> go.Figure:
    """Chosen dimensions of the table as curves over position."""
    z = _np(table)
    fig = go.Figure(
        [
            go.Scatter(
                y=z[:, d],
                mode="lines",
                name=f"dim {d}",
                hovertemplate=f"dim {d}, " + "position %{x}: %{y:.4f}<extra></extra>",
            )
            for d in dims
        ]
    )
    fig.update_layout(title=title, xaxis_title="position", yaxis_title="value", height=360)
    return fig


def rope_angle_heatmap(angles, title: str) -> go.Figure:
    """(T, rd/2) RoPE angles (rd = rotated dims per head), wrapped to [0, 2π): where each pair's
    'clock hand' points."""
    raw = _np(angles)
    fig = go.Figure(
        go.Heatmap(
            z=np.mod(raw, 2 * math.pi),
            customdata=raw,
            colorscale="Twilight",
            zmin=0,
            zmax=2 * math.pi,
            colorbar=dict(title="angle (rad)"),
            hovertemplate="position %{y}, pair %{x}<br>angle %{customdata:.4f} rad<br>mod 2π: %{z:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="dimension pair i (rotates dims i and i + rotary_dim/2)",
        yaxis_title="position",
        height=420,
    )
    fig.update_yaxes(autorange="reversed")
    return fig


def rope_frequency_line(inv_freq, title: str, local=None) -> go.Figure:
    """Radians per position of each pair; `local`: local layers' own frequencies, a second line."""
    lines = [(inv_freq, "global layers" if local is not None else "every layer")]
    lines += [(local, "local layers")] if local is not None else []
    fig = go.Figure(
        [
            go.Scatter(
                y=_np(f),
                mode="lines+markers",
                customdata=2 * math.pi / _np(f),
                name=name,
                hovertemplate=f"{name}, " + "pair %{x}: %{y:.6f} rad per position"
                "<br>full turn every %{customdata:.1f} positions<extra></extra>",
            )
            for f, name in lines
        ]
    )
    fig.update_layout(
        title=title, xaxis_title="dimension pair i", yaxis_title="radians per position", yaxis_type="log", height=360
    )
    return fig


def dot_product_lines(k, dots: dict, formula, title: str) -> go.Figure:
    """PE(p)·PE(p+k) over k for several p, and Σ cos(k·ω_i) dashed on top."""
    kk = _np(k)
    fig = go.Figure(
        [
            go.Scatter(
                x=kk,
                y=_np(v),
                mode="lines",
                name=f"p = {p}",
                hovertemplate=f"p = {p}, " + "k = %{x}: %{y:.4f}<extra></extra>",
            )
            for p, v in dots.items()
        ]
    )
    fig.add_trace(
        go.Scatter(
            x=kk,
            y=_np(formula),
            mode="lines",
            name="Σ cos(k·ωᵢ)",
            line=dict(dash="dot", color="black"),
            hovertemplate="formula, k = %{x}: %{y:.4f}<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="offset k (positions apart)", yaxis_title="dot product", height=380)
    return fig


def binary_clock(bits, table, dims: list[int], periods: list[float], title: str) -> go.Figure:
    """Left: the bits of each position. Right: chosen sinusoidal dims, each period about twice
    the previous one, so their stripes widen like the bits' do."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=("bits of the position (binary counter)", "sin dimensions, periods doubling"),
    )
    b = _np(bits)
    fig.add_trace(
        go.Heatmap(
            z=b,
            x=[f"bit {i}" for i in range(b.shape[1])],
            colorscale=[[0, "#f0f0f0"], [1, "#1f4e99"]],
            showscale=False,
            hovertemplate="position %{y}, %{x} = %{z}<extra></extra>",
        ),
        1,
        1,
    )
    z = _np(table)[:, dims]
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=[f"dim {d}<br>period {p:.0f}" for d, p in zip(dims, periods)],
            **HEAT,
            colorbar=dict(title="value"),
            hovertemplate="position %{y}, %{x}<br>value %{z:.4f}<extra></extra>",
        ),
        1,
        2,
    )
    fig.update_yaxes(autorange="reversed", title_text="position")
    fig.update_layout(title=title, height=520)
    return fig
