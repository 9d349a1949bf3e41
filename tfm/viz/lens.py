"""How far each layer's reading is from the model's final prediction, for the logit and the tuned
lens (tfm.analysis.lens.compare): KL divergence per layer on top, top-1 agreement below. The Logit
lens page and the notebook's `lens_comparison` draw it."""
from __future__ import annotations

from .figure_dicts import figure
from .sampling import esc

COLOURS = {"logit": "#1f6fb4", "tuned": "#e4572e"}
NAMES = {"logit": "logit lens", "tuned": "tuned lens"}


def lens_fit_figure(kl: dict[str, list[float]], agree: dict[str, list[float]], row_labels: list[str],
                    title: str) -> object:
    """Two panels over the layers: KL(final ‖ lens) in nats and the share of positions whose top-1
    token is the final one, one line per lens (keys of `kl`: "logit", "tuned")."""
    data = []
    for lens in kl:
        name = NAMES.get(lens, lens)
        line = dict(color=COLOURS.get(lens, "#555555"), width=2)
        data.append(dict(type="scatter", x=row_labels, y=kl[lens], mode="lines+markers", name=esc(name), meta=lens,
                         legendgroup=lens, line=line, marker=dict(size=6), xaxis="x", yaxis="y",
                         hovertemplate="%{x}: %{y:.3f} nats<extra>" + esc(name) + "</extra>"))
        data.append(dict(type="scatter", x=row_labels, y=[100 * v for v in agree[lens]], mode="lines+markers",
                         name=esc(name), meta=lens, legendgroup=lens, showlegend=False, line=line,
                         marker=dict(size=6), xaxis="x2", yaxis="y2",
                         hovertemplate="%{x}: %{y:.0f}% of positions<extra>" + esc(name) + "</extra>"))
    axis = dict(type="category", tickangle=-45)
    kl_axis, notes = _kl_axis(kl, row_labels)
    return figure(data, dict(
        title=dict(text=title), height=560, font=dict(size=13), legend=dict(orientation="h", y=1.08, x=0),
        annotations=notes,
        xaxis=dict(**axis, anchor="y", domain=[0, 1], showticklabels=False, matches="x2"),
        yaxis=dict(title=dict(text="KL to the final (nats)"), domain=[0.55, 1], **kl_axis),
        xaxis2=dict(**axis, anchor="y2", domain=[0, 1], title=dict(text="layer (residual stream after it)")),
        yaxis2=dict(title=dict(text="top-1 = final (%)"), domain=[0, 0.42], range=[0, 105]),
        margin=dict(t=80, b=10)))


def _kl_axis(kl: dict[str, list[float]], row_labels: list[str]) -> tuple[dict, list[dict]]:
    """The KL axis from 0 to just above every layer but the first; when the first (the bare
    embedding, often ten times the rest) is above that, its values are written on the chart instead
    of flattening every other layer."""
    rest = [v for ys in kl.values() for v in ys[1:]]
    top = 1.15 * max(rest) if rest else 0.0
    first = {k: ys[0] for k, ys in kl.items() if ys}
    if not rest or top <= 0 or all(v <= top for v in first.values()):
        return dict(rangemode="tozero"), []
    text = ", ".join(f"{NAMES.get(k, k)} {v:.1f}" for k, v in first.items())
    return dict(range=[0, top]), [dict(text=esc(f"{row_labels[0]} (off the scale): {text} nats"), x=0.01, y=0.99,
                                       xref="paper", yref="paper", showarrow=False, xanchor="left", yanchor="top",
                                       font=dict(size=12))]
