"""Features page and the "SAE features" tab of Why this token?: the table, the feature's
activations, read-out and histogram equal the engine's; the bars add up to the logit; a
model without an SAE gets one message."""
from __future__ import annotations

import numpy as np
import torch

from tfm.analysis import attribution
from tfm.analysis import features as FT
from tfm.analysis import steering
from tfm.analysis.sae import stream_at
from ui import state

from tests.app.conftest import chart_by_title, decode, open_page, use_random

PROMPT = "Lily found a big red ball in the park. She was happy"


def _ok(at):
    at.run()
    assert not at.exception, at.exception
    return at


def _engine():
    lm = state.load_lm(state.default_model_spec(), "cpu")
    ids = lm.tokenizer.prompt_ids(PROMPT)
    return lm, ids, FT.bundled(lm, "default")


def test_features_page_numbers_equal_the_engine():
    at = open_page("features", PROMPT)
    assert not at.error
    lm, ids, fs = _engine()
    acts = fs.sae.encode(stream_at(lm.model, torch.tensor([ids]), fs.layer)[0])      # (T, F)
    table = at.dataframe[0].value
    top = acts.topk(5, dim=-1)
    for pos in (0, len(ids) - 1):
        want = ", ".join(f"{f} ({v:.2f})" for f, v in zip(top.indices[pos].tolist(), top.values[pos].tolist()) if v > 0)
        assert table["top features (activation)"][pos] == want
    feature = int(top.indices[-1, 0])
    at.number_input(key="features.feature").set_value(feature)
    _ok(at)
    along = chart_by_title(at, f"Feature {feature} on each token")["data"][0]
    np.testing.assert_allclose(decode(along["y"]), acts[:, feature].numpy(), rtol=1e-5, atol=1e-6)
    up, up_s, down, down_s = steering.read_out(lm, fs.sae.W_dec[feature], 8)
    bars = chart_by_title(at, "decoder direction")["data"][0]
    np.testing.assert_allclose(decode(bars["x"]), down_s[::-1] + up_s[::-1], rtol=1e-5)
    hist = chart_by_title(at, "activations on held-out text")["data"][0]
    assert decode(hist["y"]).tolist() == fs.histogram(feature)[1]
    at.button(key="features.steer").click()
    _ok(at)
    assert at.session_state["steer.source"] == "SAE feature" and at.session_state["steer.feature"] == feature


def test_why_features_tab_adds_up_to_the_logit():
    at = open_page("why", PROMPT)
    at.session_state["why.tab"] = "SAE features"
    _ok(at)
    lm, ids, fs = _engine()
    attr = attribution.direct(lm, ids)
    fa = FT.feature_attribution(lm, fs.sae, lm.model(torch.tensor([ids]), trace=True).trace, ids)
    names, values = fa.parts()
    assert abs(float(values.sum()) - attr.target) < 1e-4
    bars = chart_by_title(at, "Features at layer")["data"][0]
    shown = values.numpy()[sorted(range(len(names) - 4), key=lambda i: -abs(float(values[i])))[:16]
                           + list(range(len(names) - 4, len(names)))]
    order = np.argsort(-np.abs(shown), kind="stable")[::-1]
    np.testing.assert_allclose(np.sort(decode(bars["x"])), np.sort(shown[order]), rtol=1e-5, atol=1e-7)
    assert {"SAE error", "SAE bias", "final norm bias"} <= set(bars["y"])


def test_model_without_sae_gets_one_message():
    at = open_page("features", PROMPT)
    use_random(at)
    assert not at.error and len(at.info) == 1 and "no sparse autoencoder ships" in at.info[0].value
    at.session_state["why.tab"] = "SAE features"
    at.switch_page("pages/why.py")
    _ok(at)
    assert any("no sparse autoencoder ships" in i.value for i in at.info)
