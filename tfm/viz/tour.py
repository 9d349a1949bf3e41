"""Figures and tables for the guided tour (pure functions: tfm.teach.tour values -> figure/table)."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from ..core.escape import escape_markdown
from ..teach.tour_shown import Shown
from .figure_dicts import figure


# Presentation mode: large type for a projector, no sidebar. Static CSS, no user text in it.
PRESENT_CSS = """<style>
section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
[data-testid="stExpandSidebarButton"] {display: none !important;}
.stMainBlockContainer {max-width: 1500px; padding-top: 2rem;}
.stMainBlockContainer p, .stMainBlockContainer li, .stMainBlockContainer label {font-size: 1.55rem !important;}
.stMainBlockContainer h1 {font-size: 3rem !important;}
.stMainBlockContainer h2 {font-size: 2.4rem !important;}
.stMainBlockContainer .katex {font-size: 2.1rem !important;}
.stMainBlockContainer table td, .stMainBlockContainer table th {font-size: 1.35rem !important;}
</style>"""

# Every mode: wide tables scroll sideways inside their box instead of widening the page (phones).
TABLE_CSS = """<style>
[data-testid="stTable"] {overflow-x: auto; max-width: 100%;}
[data-testid="stTable"] td {text-align: right !important; font-variant-numeric: tabular-nums;}
</style>"""


def unique(labels: tuple[str, ...]) -> list[str]:
    """Column labels made distinct (two tokens can display alike)."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


def table(shown: Shown) -> pd.DataFrame:
    """The shown values as a one-row (vector) or many-row (matrix) frame of floats."""
    values = shown.values.double().numpy()
    if values.ndim == 1:
        return pd.DataFrame([values], columns=unique(shown.cols), index=["value"])
    return pd.DataFrame(values, columns=unique(shown.cols), index=list(shown.rows))


def formatted(frame: pd.DataFrame) -> pd.DataFrame:
    """The values as text: four decimals, or none for whole numbers (token ids); −∞ for masked
    scores. Text, not a pandas Styler: a Styler took several times as long to send.
    Headers and row labels are Markdown-escaped: `st.table` renders Markdown in every cell, and
    they are token pieces of the user's prompt (a `[link](…)` must show as typed)."""
    whole = bool(((frame % 1) == 0).all().all())
    out = frame.map(lambda x: "−∞" if x == float("-inf") else (f"{x:.0f}" if whole else f"{x:.4f}"))
    out.columns = [escape_markdown(str(c)) for c in out.columns]
    out.index = [escape_markdown(str(i)) for i in out.index]
    return out


def describe(name: str, shown: Shown) -> str:
    """`**name**` · shape (…) · note, Markdown-escaped."""
    shape = " × ".join(str(n) for n in shown.shape)
    note = f" · {shown.note}" if shown.note else ""
    return f"**{escape_markdown(name)}** · shape ({shape}){escape_markdown(note)}"


CHART_AXIS = {"softmax": "attention weight a_j", "blocks": "‖x‖ (L2 norm)", "sampling": "P sampled from"}


def esc(text: str) -> str:
    """For plotly text: < > & escaped; quotes stay (plotly shows &quot; literally)."""
    return html.escape(text, quote=False)


def bar_figure(shown: Shown, title: str, ytitle: str) -> go.Figure:
    """One bar per entry of a vector, hover showing the exact value (plain dicts, unvalidated:
    `tfm.viz.figure_dicts`; tests/test_viz_plain.py validates it)."""
    labels = unique(shown.cols)
    trace = dict(
        type="bar",
        x=labels,
        y=shown.values.double().numpy(),
        marker=dict(color="#4C78A8"),
        hovertext=[esc(x) for x in labels],
        hovertemplate="%{hovertext}<br>%{y:.4f}<extra></extra>",
    )
    return figure(
        [trace],
        dict(
            title=dict(text=esc(title)),
            yaxis=dict(title=dict(text=ytitle)),
            height=360,
            margin=dict(l=40, r=20, t=60, b=40),
            font=dict(size=15),
            xaxis=dict(type="category", ticktext=[esc(x) for x in labels], tickvals=labels),
        ),
    )
