"""Logit-lens page: the heatmap equals tfm.analysis.logit_lens on the prompt's trace."""
from __future__ import annotations

import html
import re

import numpy as np
import torch

from tfm.analysis import logit_lens
from ui import models, sidebar

from tests.app.conftest import chart_by_title, decode, open_page


def expected(prompt: str):
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)[-lm.config.context_length:]
    with torch.inference_mode():
        out = lm.model(torch.tensor([ids]), trace=True)
        return lm, ids, logit_lens(lm.model, out.trace, k=5)


def cells(fig) -> list[list[str]]:
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in row] for row in fig["data"][0]["text"]]


def check_window(at, lm, ids, lens, start: int, stop: int) -> None:
    fig = chart_by_title(at, "Logit lens")
    hm = fig["data"][0]
    assert hm["y"] == lens.labels
    np.testing.assert_allclose(decode(hm["z"]), lens.top_probs[:, start:stop, 0].numpy(), rtol=1e-5, atol=1e-7)
    tok = lm.tokenizer
    want = [[tok.display_piece(int(t)) for t in row] for row in lens.top_ids[:, start:stop, 0]]
    for got_row, want_row in zip(cells(fig), want):  # cell text: the piece, or its start and "…"
        assert all(g == w or (g.endswith("…") and w.startswith(g[:-1])) for g, w in zip(got_row, want_row))
    tops = [[c.split("<br>")[1] for c in row] for row in hm["customdata"]]  # hover: each piece whole
    assert tops == [[f"{html.escape(tok.display_piece(int(t)))}: {p:.4f}" for t, p in zip(ti, tp.tolist())]
                    for ti, tp in zip(lens.top_ids[:, start:stop, 0], lens.top_probs[:, start:stop, 0])]
    bold = [["<b>" in c for c in row] for row in hm["text"]]
    nxt = ids[start + 1:stop + 1] + [None] * (stop - start - len(ids[start + 1:stop + 1]))
    assert bold == [[int(t) == n for t, n in zip(row, nxt)] for row in lens.top_ids[:, start:stop, 0]]
    r, c = len(lens.labels) - 1, stop - start - 1  # hover lists the top 5 with their probabilities
    want = [f"{html.escape(tok.display_piece(int(t)))}: {p:.4f}" for t, p in
            zip(lens.top_ids[r, stop - 1], lens.top_probs[r, stop - 1].tolist())]
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
