"""Figures for the experiments page: one builder per experiment in tfm.teach.experiments."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

FONT = dict(size=14)
COLORS = {
    "scaled": "#1f77b4",
    "unscaled": "#d62728",
    "pre": "#1f77b4",
    "post": "#d62728",
    "residual": "#1f77b4",
    "plain": "#d62728",
}


# 1-2-5 ticks written out in full: plotly's own log ticks print 0.5 as a bare "5".
LOG_TICKS = [m * 10.0**e for e in range(-3, 4) for m in (1, 2, 5)]


def _np(t) -> np.ndarray:
    return np.asarray(t, dtype=float)


def softmax_figure(res: dict) -> go.Figure:
    """Max weight, entropy and gradient vs d_k, with and without the 1/sqrt(d_k) factor."""
    panels = [
        ("max_weight", "largest attention weight"),
        ("entropy", "entropy (nats)"),
        ("grad_norm", "gradient norm reaching the scores"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[p[1] for p in panels], horizontal_spacing=0.08)
    for col, (key, label) in enumerate(panels, start=1):
        for variant, name in (("scaled", "q·k / √d_k"), ("unscaled", "q·k (no scaling)")):
            fig.add_trace(
                go.Scatter(
                    x=res["d_k"],
                    y=_np(res[variant][key]),
                    mode="lines+markers",
                    name=name,
                    legendgroup=variant,
                    showlegend=col == 1,
                    line=dict(color=COLORS[variant]),
                    hovertemplate=f"d_k %{{x}}<br>{label} %{{y:.4f}}<extra>{name}</extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(type="log", tickvals=res["d_k"], title_text="d_k (head dimension)", row=1, col=col)
    fig.add_hline(
        y=res["uniform_entropy"], line_dash="dot", row=1, col=2, annotation_text=f"uniform over {res['n_keys']} keys"
    )
    fig.update_layout(
        title=f"Softmax over {res['n_keys']} keys for random q, k as d_k grows",
        height=400,
        font=FONT,
        margin=dict(t=90, b=60),
    )
    return fig


def per_layer_log_figure(series: dict[str, np.ndarray], names: dict[str, str], title: str, y_title: str) -> go.Figure:
    """Lines over layer index on a log y axis (for values spanning many decades)."""
    fig = go.Figure()
    for key, values in series.items():
        v = _np(values)
        fig.add_trace(
            go.Scatter(
                x=np.arange(len(v)),
                y=v,
                mode="lines+markers",
                name=names[key],
                line=dict(color=COLORS.get(key)),
                hovertemplate="layer %{x}<br>%{y:.3e}<extra>" + names[key] + "</extra>",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title="layer (0 = nearest the input)",
        yaxis_title=y_title,
        yaxis_type="log",
        yaxis_exponentformat="power",
        height=400,
        font=FONT,
    )
    return fig


def depth_figure(res: dict) -> go.Figure:
    """Residual-stream norm entering/leaving each block and per-block gradient norm, pre vs post."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=("residual stream: mean L2 norm per token", "gradient norm of each block's parameters"),
    )
    for variant in ("pre", "post"):
        _depth_lines(fig, variant, res[variant])
    fig.update_xaxes(title_text="depth (0 = embeddings)", row=1, col=1)
    fig.update_xaxes(title_text="block", row=1, col=2)
    for col in (1, 2):  # log: post-norm sits far above pre-norm
        fig.update_yaxes(type="log", tickvals=LOG_TICKS, tickformat="~g", row=1, col=col)
    fig.update_layout(
        title=f"Pre-norm vs post-norm in a fresh random {len(res['pre'].grad_norm)}-layer GPT",
        height=420,
        font=FONT,
        margin=dict(t=90),
    )
    return fig


def _depth_lines(fig: go.Figure, variant: str, r) -> None:
    """One variant's two lines: the stream's norm by depth (left), each block's gradient norm (right)."""
    name = f"{variant}-norm"
    fig.add_trace(
        go.Scatter(
            x=np.arange(len(r.resid_norm)),
            y=_np(r.resid_norm),
            name=name,
            mode="lines+markers",
            line=dict(color=COLORS[variant]),
            legendgroup=variant,
            hovertemplate="after block %{x}<br>norm %{y:.4f}<extra>" + name + "</extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=np.arange(len(r.grad_norm)),
            y=_np(r.grad_norm),
            name=name,
            showlegend=False,
            mode="lines+markers",
            line=dict(color=COLORS[variant]),
            legendgroup=variant,
            hovertemplate="block %{x}<br>grad norm %{y:.4f}<extra>" + name + "</extra>",
        ),
        row=1,
        col=2,
    )


def norm_axes_figure(res: dict) -> go.Figure:
    """The tensor, its LayerNorm and its BatchNorm, with every value written in its cell."""
    names = [
        ("x", "input x"),
        ("layernorm", "LayerNorm: each row normalised"),
        ("batchnorm", "BatchNorm: each column normalised"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[n[1] for n in names], horizontal_spacing=0.06)
    d = res["x"].shape[1]
    for col, (key, label) in enumerate(names, start=1):
        z = _np(res[key])
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=[f"feature {j}" for j in range(d)],
                y=res["labels"],
                text=np.round(z, 2),
                texttemplate="%{text}",
                colorscale="RdBu",
                zmid=0,
                showscale=False,
                hovertemplate="%{y}, %{x}<br>%{z:.4f}<extra>" + label + "</extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(autorange="reversed", showticklabels=col == 1, row=1, col=col)
    fig.update_layout(
        title="Same tensor, two normalisations (rows are tokens, columns features)",
        height=380,
        font=FONT,
        margin=dict(t=90),
    )
    return fig


def timing_figure(res: dict) -> go.Figure:
    """Median time per call (bars) and every timed call (dots)."""
    names = res["names"]
    medians = [res["median_ms"][n] for n in names]
    fig = go.Figure(
        go.Bar(x=names, y=medians, name="median", hovertemplate="%{x}<br>median %{y:.3f} ms<extra></extra>")
    )
    fig.update_xaxes(tickvals=names, ticktext=[f"{n}<br>median {m:.3f} ms" for n, m in zip(names, medians)])
    for n in names:
        fig.add_trace(
            go.Scatter(
                x=[n] * len(res["samples_ms"][n]),
                y=res["samples_ms"][n],
                mode="markers",
                marker=dict(size=5, color="black", opacity=0.4),
                showlegend=False,
                hovertemplate="%{y:.3f} ms<extra>one call</extra>",
            )
        )
    fig.update_layout(
        title=f"Time per call on a {' × '.join(map(str, res['shape']))} tensor (this machine, now)",
        yaxis_title="milliseconds (log scale)",
        yaxis_type="log",
        height=420,
        font=FONT,
        yaxis_tickvals=LOG_TICKS,
        yaxis_tickformat="~g",
    )
    return fig


def _cells(values, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """A panel's values with -inf as NaN (JSON has no -inf: masked cells are drawn empty), and their text."""
    z = _np(values)
    z = np.where(np.isinf(z), np.nan, z)
    return z, np.where(np.isnan(z), "−∞", np.char.mod(fmt, np.nan_to_num(z)))


def mask_figure(res: dict, labels: list[str]) -> go.Figure:
    """Mask, raw scores, masked scores (blank = -inf) and pattern of one head."""
    panels = [
        ("mask", "mask (1 = may attend)"),
        ("scores", "scores q·k/√d"),
        ("masked_scores", "after masking (blank = −∞)"),
        ("pattern", "pattern = softmax"),
    ]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels], horizontal_spacing=0.04)
    for col, (key, label) in enumerate(panels, start=1):
        z, text = _cells(res[key], "%d" if key == "mask" else "%.2f")
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=labels,
                y=labels,
                text=text,
                texttemplate="%{text}",
                showscale=False,
                colorscale="Blues" if key in ("mask", "pattern") else "RdBu",
                zmid=None if key in ("mask", "pattern") else 0,
                hovertemplate="query %{y}, key %{x}<br>%{text}<extra>" + label + "</extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(autorange="reversed", showticklabels=col == 1, row=1, col=col)
        fig.update_xaxes(title_text="key", row=1, col=col)
    fig.update_yaxes(title_text="query", row=1, col=1)
    fig.update_layout(
        title="One head, step by step: mask → scores → masked scores → pattern",
        height=380,
        font=FONT,
        margin=dict(t=90),
    )
    return fig
