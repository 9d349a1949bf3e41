"""The app shell: pages render, the sidebar state and links carry over, bad input is explained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tfm.core.config import ModelConfig
from ui import models

from tests.app.conftest import charts, decode, open_page, allow_models, AppTest, APP

PAGES = sorted(p.stem for p in (Path(APP).parent / "pages").glob("*.py"))


def test_app_runs():
    at = open_page()
    assert not at.exception
    assert any("tfm" in t.value for t in at.title)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_with_the_default_model(page):
    at = open_page(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_prompt_is_kept_across_page_switches():
    prompt = "Across pages the prompt stays."
    at = open_page(None, prompt)
    for page in ("tokens", "attention", "home", "tokens"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, at.exception
        assert at.text_area(key="sidebar.prompt").value == prompt
    ids = models.load_lm(models.default_model_spec(), "cpu").tokenizer.encode(prompt)
    assert at.dataframe[0].value["id"].tolist() == ids


def test_link_opens_the_same_view():
    """model=, prompt=, layer=, head= in the URL: a fresh session shows that model and head."""
    spec = models.random_spec(ModelConfig.preset("tiny"), seed=3)
    prompt = "Links open the same view."
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in {"model": spec, "prompt": prompt, "layer": "1", "head": "1"}.items():
        at.query_params[name] = value
    at.switch_page("pages/attention.py").run()
    assert not at.exception, at.exception
    assert at.radio(key="sidebar.model_kind").value == "random"
    assert at.text_area(key="sidebar.prompt").value == prompt
    assert at.select_slider(key="attn.layer").value == 1 and at.select_slider(key="attn.head").value == 1
    lm = models.load_lm(spec, "cpu")
    ids = lm.tokenizer.encode(prompt)[-lm.config.context_length :]
    with torch.inference_mode():
        expected = lm.model(torch.tensor([ids]), trace=True).trace["blocks.1.attn.pattern"][0, 1].numpy().copy()
    expected[np.triu_indices(len(ids), 1)] = np.nan
    fig = [f for f in charts(at) if "Layer 1, head 1" in f["layout"]["title"]["text"]]
    assert len(fig) == 1
    np.testing.assert_allclose(decode(fig[0]["data"][0]["z"]), expected, rtol=1e-5, atol=1e-7, equal_nan=True)
    assert at.query_params["model"] == spec


def test_link_with_out_of_range_layer_is_clamped():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["layer"] = "999"
    at.query_params["head"] = "-4"
    at.switch_page("pages/attention.py").run()
    assert not at.exception, at.exception
    n_layer = models.load_lm(models.default_model_spec(), "cpu").config.n_layer
    assert at.select_slider(key="attn.layer").value == n_layer - 1
    assert at.select_slider(key="attn.head").value == 0


def test_a_folder_that_is_not_a_model_keeps_the_previous_model(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    allow_models(tmp_path)
    prompt = "Still usable."
    at = open_page("tokens", prompt)
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(tmp_path)).run()
    assert not at.exception, at.exception
    assert any("not a model folder" in e.value for e in at.error), [e.value for e in at.error]
    assert any("previous model" in i.value for i in at.info)
    tok = models.load_lm(models.default_model_spec(), "cpu").tokenizer
    at.text_area(key="sidebar.prompt").set_value(prompt + " And more.").run()
    assert not at.exception, at.exception
    assert at.dataframe[0].value["id"].tolist() == tok.encode(prompt + " And more.")


@pytest.mark.parametrize("page", ["tokens", "attention"])
def test_empty_prompt_shows_what_to_do(page):
    at = open_page(page, "   ")
    assert not at.exception, at.exception
    assert any("prompt is empty" in i.value for i in at.info)
    assert not charts(at) and not at.dataframe


def test_too_long_prompt_is_cut_from_the_left():
    prompt = " ".join(f"{(i * 7919) % 10007}x{i % 13}" for i in range(400))
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)
    assert len(ids) >= 2000
    at = open_page("tokens", prompt)
    assert any("cut from the left" in w.value for w in at.warning), [w.value for w in at.warning]
    n = lm.config.context_length
    assert at.dataframe[0].value["id"].tolist() == ids[-n:]
    at.switch_page("pages/attention.py").run()
    assert not at.exception, at.exception
    assert any("cut from the left" in w.value for w in at.warning)


def test_home_names_the_models_own_heads_and_opens_the_induction_head():
    from tfm import analysis

    lm = models.load_lm(models.default_model_spec(), "cpu")
    with torch.inference_mode():
        scores = analysis.induction_probe(lm.model, seq_len=40, bos=lm.tokenizer.eot_id)
    (pl, ph, pv), (il, ih, iv) = (analysis.top_head(scores[k]) for k in ("previous_token", "induction"))
    at = open_page()
    text = " ".join(m.value for m in at.markdown)
    assert f"**layer {pl}, head {ph}** puts {pv:.0%}" in text
    assert f"**layer {il}, head {ih}** puts {iv:.0%}" in text
    from ui import nav

    n_pages = sum(len(pages) for pages in nav.SECTIONS.values())
    assert len([l for l in at.get("page_link")]) == n_pages - 1  # every page but home, once
    at.button(key="home.show_induction").click().run()
    assert not at.exception, at.exception
    assert at.select_slider(key="attn.layer").value == il and at.select_slider(key="attn.head").value == ih
    prompt = at.text_area(key="sidebar.prompt").value
    assert prompt.count("The little dog ran") == 2
    assert any(f"Layer {il}, head {ih}" in f["layout"]["title"]["text"] for f in charts(at))


@pytest.mark.parametrize("page", ["tokens", "attention", "next_token", "tour", "why", "features"])
def test_opening_a_link_adds_no_settings_to_it(page):
    """Issue #40: each setting the app wrote into the address made the browser push a history
    entry, so a link's page needed two Backs to leave (tests/e2e/test_history_browser.py). A
    link without a setting shows its default, so the page leaves it out; a change goes in."""
    from tests.app.matrix import PROMPT, open_cell

    at = open_cell(page, None)  # the prompt is the link's only setting
    assert not at.exception, at.exception
    assert set(at.query_params) == {"prompt"}, dict(at.query_params)
    at.number_input(key="sidebar.seed").set_value(7).run()
    assert at.query_params["seed"] in ("7", ["7"]) and set(at.query_params) == {"prompt", "seed"}
    assert at.query_params["prompt"] in (PROMPT, [PROMPT])
