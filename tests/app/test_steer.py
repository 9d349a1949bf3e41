"""Steer page: the texts, the read-out and the sweep equal the engine's (same seed, same
vector); feature steering uses the shipped SAE; bad input gives one message, no traceback."""
from __future__ import annotations

import numpy as np

import tfm
from tfm.analysis import features as FT
from tfm.analysis import steering
from tfm.viz.why import md
from ui import sidebar, state

from tests.app.conftest import chart_by_title, decode, open_page, use_random

PROMPT = "Once upon a time there was a little dog"


def _ok(at):
    at.run()
    assert not at.exception, at.exception
    return at


def test_texts_readout_and_sweep_equal_the_engine():
    at = open_page("steer", PROMPT)
    at.slider(key="steer.strength").set_value(3.0)
    at.number_input(key="steer.new").set_value(12)
    _ok(at)
    assert not at.error
    lm = state.load_lm(state.default_model_spec(), "cpu")
    vec = steering.pair_vector(lm, " happy and kind", " sad and angry", lm.config.n_layer // 2, "mean")
    seed = int(at.session_state["sidebar.seed"])
    plain, steered = steering.steered_pair(lm, PROMPT, vec, 3.0, seed, 12, 0.8)
    shown = [m.value for m in at.markdown]
    assert md(plain).strip() in shown and md(steered).strip() in shown and plain != steered
    up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
    bars = chart_by_title(at, "read through the unembedding")["data"][0]
    np.testing.assert_allclose(decode(bars["x"]), down_s[::-1] + up_s[::-1], rtol=1e-5)
    token = lm.tokenizer.encode(" happy")[0]
    strengths = np.linspace(-20, 20, 21).tolist()
    want = steering.sweep(lm, lm.tokenizer.prompt_ids(PROMPT), vec, strengths, token).numpy()
    line = chart_by_title(at, "one batched run")["data"][0]
    np.testing.assert_allclose(decode(line["y"]), want, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(decode(line["x"]), strengths)


def test_strength_zero_gives_the_same_text_twice():
    at = open_page("steer", PROMPT)
    at.slider(key="steer.strength").set_value(0.0)
    at.number_input(key="steer.new").set_value(10)
    _ok(at)
    texts = [m.value for m in at.markdown if m.value and not m.value.startswith("<")][:2]
    assert len(texts) == 2 and texts[0] == texts[1]


def test_feature_source_uses_the_shipped_sae():
    at = open_page("steer", PROMPT)
    at.radio(key="steer.source").set_value("SAE feature")
    _ok(at)
    at.number_input(key="steer.feature").set_value(5)
    _ok(at)
    assert not at.error
    lm = state.load_lm(state.default_model_spec(), "cpu")
    fs = FT.bundled(lm, "default")
    vec = steering.feature_vector(fs.sae, 5, float(fs.data["hist_max"][5]) or 1.0)
    up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
    bars = chart_by_title(at, "read through the unembedding")["data"][0]
    np.testing.assert_allclose(decode(bars["x"]), down_s[::-1] + up_s[::-1], rtol=1e-5)


def test_bad_input_one_message():
    at = open_page("steer", PROMPT)
    at.text_input(key="steer.neg").set_value("")
    _ok(at)
    assert len(at.error) == 1 and "negative prompt is empty" in at.error[0].value
    at.text_input(key="steer.neg").set_value(" sad")
    _ok(at)
    at.text_input(key="steer.token").set_value(" happy happy")
    _ok(at)
    assert len(at.warning) == 1 and "not one token" in at.warning[0].value
    use_random(at)
    at.radio(key="steer.source").set_value("SAE feature")
    _ok(at)
    # an option every model offers: an info, as on the Features page (the prompt pair still works)
    assert not at.error and len(at.info) == 1 and "no sparse autoencoder ships for this model" in at.info[0].value
