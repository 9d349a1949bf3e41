"""Figures for the Features page: a feature's activation along the prompt, its activation
histogram, its top held-out contexts (escaped HTML), and the per-token feature table."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from .attention import plotly_text
from .why import POS_COLOUR


def token_table(labels: list[str], features, acts, names=None) -> pd.DataFrame:
    """One row per token: its top features as "id (activation)", strongest first, each followed
    by its label (`names(feature)`, e.g. "says ' Paris'") when the SAE ships labels."""
    rows = []
    for pos, (fs, vs) in enumerate(zip(features.tolist(), acts.tolist())):
        fired = [f"{f} ({v:.2f})" + (f" {names(f)}" if names is not None else "") for f, v in zip(fs, vs) if v > 0]
        rows.append(
            {
                "position": pos,
                "token": labels[pos],
                "top features (activation)": ("; " if names is not None else ", ").join(fired) or "—",
            }
        )
    return pd.DataFrame(rows)


def search_table(features: list[int], labels: list[str], freq: list[float]) -> pd.DataFrame:
    """The Features page's search results: id, label, share of held-out tokens it fires on."""
    return pd.DataFrame({"feature": features, "label": labels, "fires on": [f"{100 * q:.2f}%" for q in freq]})


def along_prompt(labels: list[str], acts: list[float], feature: int, name: str = "") -> go.Figure:
    """One feature's activation on every token of the prompt (`name`: its label, in the title)."""
    fig = go.Figure(
        go.Bar(
            x=[plotly_text(s) for s in labels],
            y=acts,
            marker_color=POS_COLOUR,
            hovertemplate="%{x}: %{y:.4f}<extra></extra>",
        )
    )
    title = f"Feature {feature} on each token of the prompt" + (f"<br>{html.escape(name)}" if name else "")
    fig.update_layout(title=title, xaxis_title="token", yaxis_title="activation", height=340)
    return fig


def histogram(centres: list[float], counts: list[int], feature: int, freq: float) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=centres,
            y=counts,
            marker_color=POS_COLOUR,
            hovertemplate="activation ≈ %{x:.3f}: %{y} tokens<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Feature {feature}: activations on held-out text<br>when it fires ({100 * freq:.2f}% of tokens)",
        xaxis_title="activation",
        yaxis_title="tokens",
        height=320,
        bargap=0.05,
    )
    return fig


def contexts_html(contexts: list[tuple[list[str], list[float]]]) -> str:
    """Each context as a line of token pieces shaded by the feature's activation (token text
    escaped: it is shown as text, never read as HTML)."""
    top = max((max(a) for _, a in contexts), default=0.0) or 1.0
    lines = []
    for pieces, acts in contexts:
        spans = []
        for piece, a in zip(pieces, acts):
            alpha = max(0.0, min(1.0, a / top))
            text = html.escape(piece).replace("\n", "⏎")
            spans.append(
                f'<span title="{a:.3f}" style="background: rgba(255,140,0,{alpha:.2f}); '
                f'white-space: pre; border-radius: 3px">{text}</span>'
            )
        lines.append(f'<div style="font-family: monospace; margin: 2px 0">{"".join(spans)}</div>')
    return "\n".join(lines)
