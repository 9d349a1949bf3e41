"""Figures built without plotly's validation (tfm.viz.figure_dicts) are validated here, on the bundled
model's real numbers: `go.Figure(fig.to_dict())` raises on any invalid property or value."""

from __future__ import annotations

import json
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch

import tfm
from tfm.analysis import attribution
from tfm.analysis.lens.logit import decode_streams
from tfm.generation.sampling import SamplingSettings, breakdown
from tfm.generation.timeline import step_record
from tfm.viz import attention as fa
from tfm.teach import tour
from tfm.viz import sampling as fs
from tfm.viz import tour as ft
from tfm.viz import why as fw


@pytest.fixture(scope="module")
def run():
    lm = tfm.load("default")
    ids = lm.tokenizer.encode("Once upon a time a little fox found three shiny stones")
    with torch.no_grad():
        out = lm.model(torch.tensor([ids]), trace=True)
    return lm, ids, out


def valid(fig: go.Figure) -> go.Figure:
    """Validated, and sent to the browser exactly as its validated twin would be: a value the
    validator would coerce (a colorscale name plotly.js reads reversed, a bare title) differs."""
    checked = go.Figure(fig.to_dict())  # validation: raises ValueError on anything invalid
    assert checked.data, "the figure has no trace"
    sent, twin = (pruned(json.loads(pio.to_json(f, validate=False))) for f in (fig, checked))
    assert sent == twin
    return checked


def pruned(x):
    """Without empty lists and dicts: the validator drops an empty `shapes=[]`, plotly.js too."""
    if isinstance(x, dict):
        return {k: pruned(v) for k, v in x.items() if v not in ([], {})}
    return [pruned(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize(
    "settings", [SamplingSettings(0.8, 0, 0.9), SamplingSettings(0.0, 0, 1.0), SamplingSettings(1.5, 20, 1.0)]
)
def test_the_next_token_chart_is_valid(run, settings):
    lm, ids, out = run
    logits = out.logits[0, -1]
    shown = fs.shown_ids(logits, 15)
    fig = valid(
        fs.next_token_figure(
            breakdown(logits, settings=settings),
            shown,
            lm.tokenizer.display_pieces(shown),
            fs.next_token_title(15, lm.tokenizer.vocab_size, settings.temperature, settings.top_k, settings.top_p),
            chosen=shown[3],
        )
    )
    assert "chosen" in [a.text for a in fig.layout.annotations]
    # readable on a 390 px phone: the legend under the axes (it reserves its room there, off the
    # title), the title and the tail's label in lines of at most 40 and 8 characters
    legend = fig.layout.legend
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom")
    lines = re.sub(r"</?sup>", "", fig.layout.title.text).split("<br>")
    assert lines[0] == "Next-token probabilities" and max(map(len, lines)) <= 40, lines
    tail = next(t for t in fig.data if t.meta == "tail")
    assert max(len(line) for line in tail.x[0].split("<br>")) <= 8 and fig.layout.xaxis3.tickangle == 0


def test_the_generation_step_charts_are_valid(run):
    lm, ids, out = run
    steps = list(tfm.generate(lm, ids, 3, 0.8, seed=1, trace=True, stop_at_eot=False))
    r = step_record(steps[-1])
    labels = [lm.tokenizer.display_piece(i) for i in ids + [s.token_id for s in steps]]
    fig, hidden = fs.step_attention_figure(r.attn, labels[: r.attn.shape[-1]], 8, "step attention")
    assert hidden is not None and 0 <= hidden <= 1
    assert len(valid(fig).data[0].y) == lm.config.n_layer * lm.config.n_head  # a row per (layer, head)
    with torch.no_grad():
        lens = decode_streams(lm.model, r.resid[:, None], k=5, keep_probs=False, n_words=lm.tokenizer.vocab_size)
    top = lens.top_ids[:, 0]
    valid(
        fs.step_lens_figure(
            top,
            lens.top_probs[:, 0].float(),
            lens.labels,
            [lm.tokenizer.display_pieces(row.tolist()) for row in top],
            r.token_id,
            "lens",
        )
    )


def test_the_attention_figures_are_valid(run):
    lm, ids, out = run
    pattern = out.trace["blocks.1.attn.pattern"][0]  # (H, T, T)
    labels = [lm.tokenizer.display_piece(i) for i in ids]
    cells = fa.window(pattern, 0, len(ids) - 1)
    valid(fa.heatmap(cells[0], labels, "one head"))
    valid(fa.heatmap(cells[0], labels, "one head, log", log=True))
    all_layers = torch.stack([out.trace[f"blocks.{i}.attn.pattern"][0] for i in range(lm.config.n_layer)])
    valid(fa.model_view(fa.window(all_layers, 0, len(ids) - 1), labels, "every head"))
    valid(fa.head_view(cells, [0, 2], labels, "lines", token=3))


def test_the_why_figures_are_valid(run):
    lm, ids, out = run
    attr = attribution.direct(lm, ids, len(ids) - 2, trace=out.trace)
    values, heads = attr.values.numpy(), attr.heads.numpy()
    bars = valid(fw.contrib_bars(list(attr.components), values, "top contributions"))
    assert len(bars.data[0].y) == 15 and bars.data[0].marker.color[0] in (fw.POS_COLOUR, fw.NEG_COLOUR)
    effects = -0.5 * np.concatenate([heads.ravel(), attr.mlps.numpy()])
    order = attribution.head_and_mlp_names(*heads.shape)
    both = valid(fw.contrib_bars(order, np.concatenate([heads.ravel(), attr.mlps.numpy()]), "beside", effects))
    assert [t.name for t in both.data] == ["direct attribution", "− change when zero-ablated"]
    grid = valid(fw.head_heatmap(heads, "every head", clickable=True))
    assert grid.data[0].zmax == pytest.approx(float(np.abs(heads).max()))  # centred on 0
    assert len(grid.data[1].x) == heads.size  # a click target per cell
    valid(fw.head_heatmap(np.zeros_like(heads), "no signal"))  # all zero: a ±1 colour range
    labels = [lm.tokenizer.display_piece(i) for i in ids]
    src = valid(fw.source_bars(attr.by_source(1, 0).numpy(), labels, "sources"))
    assert len(src.data[0].x) == len(ids)


def test_the_tour_bar_chart_is_valid(run):
    lm, ids, out = run
    labels = [lm.tokenizer.display_piece(i) for i in ids]
    steps = tour.tour(lm, out.trace, ids, labels, tour.Focus(pos=len(ids) - 1))
    charted = [s for s in steps if s.chart is not None]
    assert charted
    for step in charted:
        fig = valid(ft.bar_figure(step.chart, f"{step.title} <b>x</b>", "value"))
        assert fig.layout.xaxis.type == "category" and len(fig.data[0].x) == step.chart.values.numel()


def test_class_room_figures_are_valid_and_escape_what_students_typed():
    from tfm.viz import classroom as fc

    counts = {f"answer {i}": i for i in range(1, 16)} | {"<b>x</b>": 20}
    fig = valid(fc.answer_bars(counts, "16 of 30 students answered", model="answer 15"))
    bar = fig.data[0]
    assert list(bar.y[:2]) == ["&lt;b&gt;x&lt;/b&gt;", "answer 15"] and list(bar.x[:2]) == [20, 15]
    assert bar.y[-1] == "other (4 answers)" and bar.x[-1] == 1 + 2 + 3 + 4  # beyond the 12 most common
    assert bar.marker.color[1] == fc.MODEL and bar.marker.color[0] == fc.ANSWER and bar.marker.color[-1] == fc.OTHER
    for model, count in (("answer 2", 2), ("␣saw", 0)):  # rare, or nobody's: its own red bar, out of "other"
        bar = valid(fc.answer_bars(counts, "t", model=model)).data[0]
        assert (bar.y[-2], bar.x[-2], bar.marker.color[-2]) == (model, count, fc.MODEL)
        assert bar.y[-1] == f"other ({3 if count else 4} answers)" and bar.x[-1] == 10 - count
        assert sum(bar.x) == sum(counts.values()) and list(bar.marker.color).count(fc.MODEL) == 1
    bins = [f"{i / 10:.1f}–{(i + 1) / 10:.1f}" for i in range(10)]
    fig = valid(fc.answer_bars({"0.3–0.4": 2}, "t", order=bins))
    assert list(fig.data[0].y) == bins and list(fig.data[0].x) == [0, 0, 0, 2, 0, 0, 0, 0, 0, 0]
    grid = valid(fc.head_grid(30, 9, chosen=(4, 2)))  # the picked head dark, never the model's red
    colours = list(grid.data[0].marker.color)
    assert len(grid.data[0].x) == 270 and colours[4 * 9 + 2] == fc.PICKED and fc.MODEL not in colours
    assert set(valid(fc.head_grid(30, 9)).data[0].marker.color) == {fc.ANSWER}  # nothing picked until a click


def test_the_lens_comparison_chart_is_valid(run):
    from tfm.analysis.lens.compare import prompt_fits
    from tfm.analysis.lens.tuned import shipped_lens
    from tfm.viz import lens as fl

    lm, ids, out = run
    fits = prompt_fits(lm.model, out.trace, shipped_lens("default", lm))
    kl = {k: f.mean_kl() for k, f in fits.items()}
    fig = valid(fl.lens_fit_figure(kl, {k: f.agreement() for k, f in fits.items()}, fits["logit"].labels, "t"))
    assert fig.layout.yaxis.range[1] < kl["logit"][0]  # the embedding's KL is written, off the scale
    note = fig.layout.annotations[0]
    assert f"{kl['logit'][0]:.1f}" in note.text
    # written above the KL panel's plot area, so no line (clipped to that area) runs through it
    assert note.yref == "paper" and note.yanchor == "bottom" and note.y >= fig.layout.yaxis.domain[1]
    valid(
        fl.lens_fit_figure(
            {"logit": [0.5, 0.2, 0.0]}, {"logit": [0.1, 0.5, 1.0]}, ["embed", "block 0", "block 1"], "<b>x</b>"
        )
    )
