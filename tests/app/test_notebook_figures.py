"""The app and notebooks draw with the same builders: tfm.viz's notebook functions, called on the
prompt's trace, give the same chart as the page (numbers, labels, cell text, hover)."""

from __future__ import annotations

import json

import numpy as np
import torch

import tfm.viz as viz
from ui import models

from tests.app.conftest import chart_by_title, decode, open_page


def prompt_run(at):
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.prompt_ids(at.text_area(key="sidebar.prompt").value)
    with torch.inference_mode():
        return lm, ids, lm.model(torch.tensor([ids]), trace=True).trace


def same(page: dict, ours, keys=("x", "y", "text", "customdata")) -> None:
    got, want = page["data"][0], json.loads(ours.to_json())["data"][0]  # both as the browser gets them
    np.testing.assert_allclose(
        decode(got["z"]).astype(float), decode(want["z"]).astype(float), rtol=1e-6, equal_nan=True
    )
    for key in keys:
        assert (key in got) == (key in want), key
        if key in want:
            assert decode(got[key]).tolist() == decode(want[key]).tolist(), key


def test_attention_page_and_notebook_draw_the_same_pattern():
    at = open_page("attention")
    lm, ids, trace = prompt_run(at)
    ours = viz.attention_pattern(trace, viz.tokens(lm, ids), layer=0, head=0)
    page = chart_by_title(at, "Layer 0, head 0")
    same(page, ours)
    assert page["layout"]["title"]["text"] == ours.layout.title.text


def test_logit_lens_page_and_notebook_draw_the_same_grid():
    at = open_page("logit_lens")
    lm, ids, trace = prompt_run(at)
    same(chart_by_title(at, "Logit lens"), viz.logit_lens(lm, trace, ids))


def test_tuned_lens_page_and_notebook_draw_the_same_grid_and_kl_chart():
    from tfm.analysis.lens.tuned import shipped_lens

    at = open_page("logit_lens")
    at.radio(key="lens.kind").set_value("tuned").run()
    assert not at.exception, at.exception
    lm, ids, trace = prompt_run(at)
    lens = shipped_lens("default", lm)
    same(chart_by_title(at, "Tuned lens"), viz.logit_lens(lm, trace, ids, tuned=lens))
    page = chart_by_title(at, "against the final prediction")
    ours = json.loads(viz.lens_comparison(lm, trace, lens).to_json())
    assert [(t["meta"], t["yaxis"]) for t in page["data"]] == [(t["meta"], t["yaxis"]) for t in ours["data"]]
    for got, want in zip(page["data"], ours["data"]):
        np.testing.assert_allclose(decode(got["y"]).astype(float), decode(want["y"]).astype(float), rtol=1e-6)
        assert got["x"] == want["x"]
