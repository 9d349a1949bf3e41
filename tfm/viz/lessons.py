"""Figures for the induction-head lesson (pure: numbers from tfm.teach.lessons -> plotly figures)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ..teach.lessons import LessonResult

COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")


def loss_figure(
    losses: list[float], formed_step: int | None, plateau: tuple[int, float] | None, total: int
) -> go.Figure:
    """Training loss per step, with the plateau shaded and the step where an induction head formed marked."""
    fig = go.Figure(
        go.Scatter(
            x=list(range(1, len(losses) + 1)),
            y=losses,
            mode="lines",
            name="loss",
            line=dict(color=COLORS[0]),
            hovertemplate="step %{x}<br>loss %{y:.3f}<extra></extra>",
        )
    )
    if plateau is not None:
        fig.add_vrect(
            x0=0,
            x1=plateau[0],
            fillcolor="#BBBBBB",
            opacity=0.25,
            line_width=0,
            annotation_text=f"plateau: mean {plateau[1]:.2f} nats",
            annotation_position="bottom left",
        )
    if formed_step is not None:
        fig.add_vline(
            x=formed_step,
            line_dash="dash",
            line_color="#E45756",
            annotation_text=f"induction head formed (step {formed_step})",
        )
    fig.update_layout(
        title="Loss on the copied partners: a plateau, then a sudden drop",
        height=380,
        xaxis=dict(title="training step", range=[0, total]),
        yaxis_title="cross-entropy (nats)",
        margin=dict(l=50, r=20, t=60, b=50),
    )
    return fig


def score_figure(res: LessonResult) -> go.Figure:
    """Induction score of every head at every snapshot, with the threshold."""
    steps = [s.step for s in res.snapshots]
    n_layer, n_head = res.snapshots[0].induction.shape
    fig = go.Figure()
    for layer in range(n_layer):
        for head in range(n_head):
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=[float(s.induction[layer, head]) for s in res.snapshots],
                    mode="lines+markers",
                    name=f"layer {layer} head {head}",
                    line=dict(color=COLORS[(layer * n_head + head) % len(COLORS)], dash="solid" if layer else "dot"),
                    hovertemplate=f"layer {layer} head {head}<br>step %{{x}}<br>induction score %{{y:.3f}}<extra></extra>",
                )
            )
    fig.add_hline(
        y=res.settings.threshold,
        line_dash="dash",
        line_color="grey",
        annotation_text=f"threshold {res.settings.threshold:g}",
    )
    fig.update_layout(
        title="Induction score per head (TransformerLens definition) on the second copy of a fixed probe",
        xaxis_title="training step",
        yaxis=dict(title="induction score", range=[0, 1]),
        height=380,
        margin=dict(l=50, r=20, t=60, b=50),
    )
    return fig


def pattern_figure(pattern, labels: list[str], title: str) -> go.Figure:
    """One head's (T, T) attention pattern on the probe: query rows, key columns."""
    fig = go.Figure(
        go.Heatmap(
            z=pattern.numpy(),
            x=labels,
            y=labels,
            colorscale="Blues",
            zmin=0,
            zmax=1,
            colorbar=dict(title="weight"),
            hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=html.escape(title, quote=False),
        height=560,
        xaxis=dict(title="key position", type="category"),
        yaxis=dict(title="query position", autorange="reversed", type="category"),
        margin=dict(l=60, r=20, t=60, b=50),
    )
    return fig
