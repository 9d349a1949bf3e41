"""Plotly figures for the LayerNorm & residual-stream page: tensors in, go.Figure out."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from tfm.core.norm import has_bias


TOP = dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0)  # legend above the plot


def output_caption(cfg) -> str:
    """What `cfg`'s norms' output statistics come to, true for its kind (`cfg.norm`) and whether
    it adds a bias (`tfm.core.norm.has_bias`): a LayerNorm centres each token (its output mean is the bias's mean
    plus a small gain-weighted term, ~0 without a bias); an RMSNorm only divides by the root mean
    square, so no mean is pinned and only the size (rms ~ the gains') is."""
    if cfg.norm == "layernorm":
        mean = (
            "mean ≈ the bias's mean" if has_bias(cfg) else "mean ≈ 0 (it subtracts each token's mean and adds no bias)"
        )
        return f"{mean}, std ≈ the gains' size"
    return (
        "rms ≈ the gains' size (an RMSNorm divides by the root mean square; it subtracts no mean and "
        "adds no bias, so the mean is not pinned and can differ between tokens)"
    )


def plotly_text(s: str) -> str:
    """Token text for plotly, which reads <tags> and &entities;: escape them."""
    return html.escape(s, quote=False)


def _np(t) -> np.ndarray:
    return t.detach().cpu().double().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=float)


def colour_cap(values: np.ndarray) -> tuple[int, float] | None:
    """(token, colour maximum) when one token's column of non-negative (L, T) values is over 10x
    every other's (a real model's attention-sink token: SmolLM2's first stream norm is ~2e4, the
    others ~1e2): uncapped, every other cell would be the same colour. Else None."""
    if values.ndim != 2 or values.shape[1] < 2 or not np.isfinite(values).all() or values.min() < 0:
        return None
    cols = values.max(axis=0)
    top = int(cols.argmax())
    rest = float(np.delete(cols, top).max())
    return (top, rest) if rest > 0 and cols[top] > 10 * rest else None


def layer_token_heatmap(
    z,
    token_labels: list[str],
    layer_labels: list[str],
    title: str,
    colorbar: str,
    colorscale: str = "Viridis",
    height: int = 300,
) -> go.Figure:
    """(L, T) values: one row per layer, one column per token."""
    values = _np(z)
    cap = colour_cap(values)
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=[plotly_text(t) for t in token_labels],
            y=layer_labels,
            colorscale=colorscale,
            colorbar=dict(title=colorbar, tickformat=".3g"),
            zmin=None if cap is None else float(values.min()),
            zmax=None if cap is None else cap[1],
            hovertemplate="%{y}, token %{x}<br>%{z:.5g}<extra></extra>",
        )
    )
    # Each map has its own colour range: say what it is, so a tiny spread does not look big.
    title = f"{title}<br><sup>range {values.min():.3g} … {values.max():.3g}"
    if cap is not None:
        title += f"; colours stop at {cap[1]:.3g}: token {cap[0]} is far above"  # (hover: exact values)
    title += "</sup>"
    fig.update_layout(title=title, xaxis_title="token", yaxis_title="layer", height=height)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-45)
    return fig


def param_boxes(values: list, labels: list[str], title: str, y_title: str) -> go.Figure:
    """One box per norm summarising one of its parameter vectors (gain or bias)."""
    fig = go.Figure(
        [
            go.Box(y=_np(v), name=name, boxpoints=False, marker_color="#1f77b4", showlegend=False)
            for v, name in zip(values, labels)
        ]
    )
    fig.update_layout(title=title, xaxis_title="norm (block.name)", yaxis_title=y_title, height=340)
    return fig


def param_histogram(values, title: str, x_title: str) -> go.Figure:
    fig = go.Figure(
        go.Histogram(
            x=_np(values), nbinsx=60, marker_color="#1f77b4", hovertemplate="%{x}<br>%{y} dimensions<extra></extra>"
        )
    )
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title="number of dimensions", height=340)
    return fig


def growth_lines(resid, layer_labels: list[str], title: str) -> go.Figure:
    """Residual-stream norm per layer: mean and largest over the prompt's tokens."""
    r = _np(resid)
    fig = go.Figure(
        [
            go.Scatter(
                x=layer_labels,
                y=r.mean(1),
                mode="lines+markers",
                name="mean over tokens",
                hovertemplate="%{x}: %{y:.4f}<extra>mean</extra>",
            ),
            go.Scatter(
                x=layer_labels,
                y=r.max(1),
                mode="lines+markers",
                name="largest token",
                hovertemplate="%{x}: %{y:.4f}<extra>largest</extra>",
            ),
        ]
    )
    fig.update_layout(title=title, xaxis_title="residual stream at", yaxis_title="L2 norm", height=340, legend=TOP)
    return fig


def sublayer_bars(attn, mlp, layer_labels: list[str], title: str) -> go.Figure:
    """Mean L2 norm over tokens of what attention and the MLP add, per layer."""
    fig = go.Figure(
        [
            go.Bar(
                x=layer_labels,
                y=_np(attn).mean(1),
                name="attention output",
                hovertemplate="%{x}: %{y:.4f}<extra>attention</extra>",
            ),
            go.Bar(
                x=layer_labels, y=_np(mlp).mean(1), name="MLP output", hovertemplate="%{x}: %{y:.4f}<extra>MLP</extra>"
            ),
        ]
    )
    fig.update_layout(
        title=title, barmode="group", xaxis_title="layer", yaxis_title="mean L2 norm", height=340, legend=TOP
    )
    return fig


def worked_lines(ex, title: str) -> go.Figure:
    """The worked example's vectors across dimensions: input, normalised, output."""
    fig = go.Figure(
        [
            go.Scatter(
                y=_np(getattr(ex, k)),
                mode="lines",
                name=name,
                hovertemplate="dim %{x}: %{y:.5f}<extra>" + name + "</extra>",
            )
            for k, name in (("x", "input x"), ("normalized", "normalised"), ("output", "output"))
        ]
    )
    fig.update_layout(title=title, xaxis_title="dimension", yaxis_title="value", height=340, legend=TOP)
    return fig


def depth_lines(results: dict, key: str, title: str, y_title: str, log: bool = False) -> go.Figure:
    """One line per configuration (label -> depth_norms result) of `key` over depth.
    resid_norm: x = blocks passed (0 = the embedding); grad_norm: x = block index."""
    fig = go.Figure()
    for label, res in results.items():
        y = _np(getattr(res, key))
        fig.add_trace(
            go.Scatter(
                x=list(range(len(y))),
                y=y,
                mode="lines+markers",
                name=label,
                hovertemplate="%{x}: %{y:.4g}<extra>" + label + "</extra>",
            )
        )
    x_title = "blocks passed (0 = the embedding)" if key == "resid_norm" else "block"
    fig.update_layout(title=title, xaxis_title=x_title, yaxis_title=y_title, height=380, legend=TOP)
    if log:
        fig.update_yaxes(type="log", tickformat=".2g", dtick="D2")  # labels at 1, 2, 5 per decade
    return fig
