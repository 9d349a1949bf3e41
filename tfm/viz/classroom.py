"""A class room's figures: the answers' histogram (counts only: never who) and the all-heads
grid a student clicks to answer a head question. Built from plain dicts (tfm.viz.figure_dicts): the
teacher's histogram is redrawn every second while a question is open."""

from __future__ import annotations

import plotly.graph_objects as go

from .attention import plotly_text
from .figure_dicts import figure

MAX_BARS = 12  # the most common answers; the rest count as "other"
ANSWER, OTHER = "#4c78a8", "#b0b0b0"
MODEL = "#e45756"
PICKED = "#222222"  # the head a student picked (red is kept for the model's answer)


def top_answers(counts: dict[str, int], most: int = MAX_BARS, keep: str | None = None) -> list[tuple[str, int]]:
    """The `most` most common answers (ties in label order), then "other (n answers)". `keep` (the
    model's answer, once revealed) always gets a bar of its own: 0 when nobody gave it, which is
    what a class should see, not a red key with no red bar."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown, rest = ranked[:most], ranked[most:]
    if keep is not None and keep not in dict(shown):
        rest = [kv for kv in rest if kv[0] != keep]
        shown.append((keep, counts.get(keep, 0)))
    if rest:
        shown.append((f"other ({len(rest)} answers)", sum(n for _, n in rest)))
    return shown


def answer_bars(
    counts: dict[str, int], title: str, model: str | None = None, order: list[str] | None = None
) -> go.Figure:
    """Horizontal bars: how many students gave each answer (`order`: bins in their own order,
    else the most common first); the bar of `model`'s answer (after the reveal) in red. Answers
    are typed by strangers: plotly reads <tags> in labels, so they are escaped."""
    rows = [(k, counts.get(k, 0)) for k in order] if order else top_answers(counts, keep=model)
    labels, values = [r[0] for r in rows], [r[1] for r in rows]
    colors = [
        MODEL if model is not None and label == model else OTHER if label.startswith("other (") else ANSWER
        for label in labels
    ]
    bar = {
        "type": "bar",
        "orientation": "h",
        "y": [plotly_text(label) for label in labels],
        "x": values,
        "marker": {"color": colors},
        "text": [str(v) for v in values],
        "textposition": "auto",
        "hovertemplate": "%{y}: %{x} answers<extra></extra>",
    }
    return figure(
        [bar],
        {
            "title": {"text": title, "x": 0, "xanchor": "left"},
            "height": 140 + 32 * max(len(labels), 1),
            "margin": {"l": 10, "r": 10, "t": 60, "b": 40},
            "xaxis": {
                "title": {"text": "students"},
                "rangemode": "tozero",
                **({"dtick": 1} if max(values, default=0) <= 10 else {}),
            },  # whole students
            "yaxis": {"autorange": "reversed", "automargin": True, "type": "category", "tickfont": {"size": 16}},
        },
    )


def head_grid(n_layer: int, n_head: int, chosen: tuple[int, int] | None = None) -> go.Figure:
    """Every head as a dot (head across, layer down); clicking one selects it. Nothing is picked
    until the student clicks (`chosen` None): the picked head is drawn dark and larger."""
    xs = [h for _ in range(n_layer) for h in range(n_head)]
    ys = [layer for layer in range(n_layer) for _ in range(n_head)]
    picked = [chosen == (y, x) for x, y in zip(xs, ys)]
    small = 14 if n_head <= 16 else 8
    dots = {
        "type": "scatter",
        "mode": "markers",
        "x": xs,
        "y": ys,
        "marker": {
            "size": [small + 6 if p else small for p in picked],
            "color": [PICKED if p else ANSWER for p in picked],
            "symbol": "square",
        },
        "hovertemplate": "layer %{y}, head %{x}<extra></extra>",
    }
    return figure(
        [dots],
        {
            "title": {"text": "Every head: click the one you pick", "x": 0, "xanchor": "left"},
            "height": 110 + (18 if n_layer <= 16 else 14) * n_layer,
            "margin": {"l": 10, "r": 10, "t": 50, "b": 40},
            "clickmode": "event+select",
            "dragmode": False,
            "xaxis": {"title": {"text": "head"}, "dtick": 1, "range": [-0.6, n_head - 0.4]},
            "yaxis": {"title": {"text": "layer"}, "autorange": "reversed", "dtick": 1 if n_layer <= 16 else 2},
        },
    )
