"""Features page and the "SAE features" tab of Why this token?: the table, the feature's
activations, read-out and histogram equal the engine's; the bars add up to the logit; a
model without an SAE gets one message."""

from __future__ import annotations

import numpy as np
import torch

from tfm.analysis import attribution
from tfm.analysis.dictionaries import features as FT
from tfm.analysis.steering import vectors as steering
from tfm.analysis.dictionaries.sae import stream_at
from ui import models

from tests.app.conftest import as_shown, chart_by_title, decode, open_page, use_random

PROMPT = "Lily found a big red ball in the park. She was happy"


def _ok(at):
    at.run()
    assert not at.exception, at.exception
    return at


def _engine():
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.prompt_ids(PROMPT)
    return lm, ids, FT.bundled(lm, "default")


def test_features_page_numbers_equal_the_engine():
    at = open_page("features", PROMPT)
    assert not at.error
    lm, ids, fs = _engine()
    acts = fs.sae.encode(stream_at(lm.model, torch.tensor([ids]), fs.layer)[0])  # (T, F)
    table = at.dataframe[0].value
    top = acts.topk(5, dim=-1)
    for pos in (0, len(ids) - 1):
        want = "; ".join(
            f"{f} ({v:.2f}) {fs.labels.features[f].label}"  # each id with its label
            for f, v in zip(top.indices[pos].tolist(), top.values[pos].tolist())
            if v > 0
        )
        assert table["top features (activation)"][pos] == want
    feature = int(top.indices[-1, 0])
    at.number_input(key="features.feature").set_value(feature)
    _ok(at)
    along_fig = chart_by_title(at, f"Feature {feature} on each token")
    assert fs.labels.features[feature].label in along_fig["layout"]["title"]["text"].replace("&#x27;", "'")
    assert any(
        as_shown(m.value) == f"**Label:** {fs.labels.features[feature].label}"
        for m in at.markdown
        if m.value.startswith("**Label")
    )
    along = along_fig["data"][0]
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
    shown = values.numpy()[
        sorted(range(len(names) - 4), key=lambda i: -abs(float(values[i])))[:16]
        + list(range(len(names) - 4, len(names)))
    ]
    order = np.argsort(-np.abs(shown), kind="stable")[::-1]
    np.testing.assert_allclose(np.sort(decode(bars["x"])), np.sort(shown[order]), rtol=1e-5, atol=1e-7)
    assert {"SAE error", "SAE bias", "final norm bias"} <= set(bars["y"])
    labelled = {f"feature {int(f)}: {fs.labels.features[int(f)].label}" for f in fa.features}  # ids with labels
    assert {y for y in bars["y"] if y.startswith("feature")} <= labelled and len(set(bars["y"]) & labelled) >= 10


def test_model_without_sae_gets_one_message():
    at = open_page("features", PROMPT)
    use_random(at)
    assert not at.error and len(at.info) == 1 and "no sparse autoencoder ships" in at.info[0].value
    at.session_state["why.tab"] = "SAE features"
    at.switch_page("pages/why.py")
    _ok(at)
    assert any("no sparse autoencoder ships" in i.value for i in at.info)


def test_the_page_opens_on_the_strongest_sparse_feature_of_the_last_token():
    at = open_page("features")  # the feature is chosen on the page's first prompt
    assert not at.error
    lm, _, fs = _engine()
    ids = lm.tokenizer.prompt_ids(at.text_area(key="sidebar.prompt").value)
    acts = fs.sae.encode(stream_at(lm.model, torch.tensor([ids]), fs.layer)[0])[-1]  # (F,)
    freq = fs.data["freq"].float()
    sparse = [f for f in range(len(acts)) if acts[f] > 0 and freq[f] <= FT.DENSE_SHARE]
    assert sparse, "no sparse feature fires on the last token of this prompt"
    want = max(sparse, key=lambda f: float(acts[f]))
    assert at.number_input(key="features.feature").value == want
    # the last token's strongest feature overall is dense here: the page said why it opened elsewhere
    strongest = int(acts.argmax())
    assert freq[strongest] > FT.DENSE_SHARE and strongest != want
    at.number_input(key="features.feature").set_value(strongest)
    _ok(at)
    assert any("a dense feature" in c.value for c in at.caption)


def test_with_no_sparse_feature_firing_the_strongest_of_all_opens():
    lm, ids, fs = _engine()
    trace = lm.model(torch.tensor([ids]), trace=True).trace
    acts = fs.sae.encode(stream_at(lm.model, torch.tensor([ids]), fs.layer)[0])[-1]
    assert FT.opening_feature(fs, trace, max_share=0.0) == int(acts.argmax())
    assert FT.opening_feature(fs, trace, position=2, max_share=1.0) == int(
        fs.sae.encode(stream_at(lm.model, torch.tensor([ids]), fs.layer)[0])[2].argmax()
    )


def _link(feature: str | None):
    from tests.app.matrix import open_cell

    at = open_cell("features", None, params={} if feature is None else {"feature": feature})
    assert not at.exception, at.exception
    return at


def test_a_link_feature_out_of_range_is_ignored_as_text_is():
    """Issue #40: feature=-1, 1536 (one past the SAE's 1536 features) or a 20-digit number used to
    open the page's own choice without a word; now they get the word `abc` gets."""
    plain = _link(None)
    opened = plain.number_input(key="features.feature").value
    assert not plain.warning and 0 <= opened < 1536
    for value in ("-1", "1536", "9" * 20, "abc"):
        at = _link(value)
        shown = [as_shown(w.value) for w in at.warning]
        assert any(w.startswith(f"Ignored the link's feature={value}: ") for w in shown), (value, shown)
        assert at.number_input(key="features.feature").value == opened
    at = _link("1535")  # the last feature is in range: opened, no word
    assert not at.warning and at.number_input(key="features.feature").value == 1535


def test_search_finds_a_feature_by_the_token_it_says_and_opens_it():
    lm, _, fs = _engine()
    says = next(
        f
        for f, lab in enumerate(fs.labels.features)
        if lab.says_id is not None and lm.tokenizer.decode([lab.says_id]).strip().isalpha()
    )
    word = lm.tokenizer.decode([fs.labels.features[says].says_id]).strip()
    at = open_page("features", PROMPT)
    at.text_input(key="features.search").set_value(word)
    _ok(at)
    found = next(d.value for d in at.dataframe if "label" in d.value.columns)  # the matches' table
    assert found["feature"].tolist() == fs.labels.search(word, 50) and says in found["feature"].tolist()
    assert found["label"].tolist() == [fs.labels.features[f].label for f in found["feature"]]
    assert found["feature"].tolist()[0] == says or fs.labels.features[found["feature"].tolist()[0]].says_id is not None
    at.selectbox(key="features.match").set_value(says)
    at.button(key="features.open").click()
    _ok(at)
    assert at.number_input(key="features.feature").value == says
    at.text_input(key="features.search").set_value("zzzz-no-such-token")
    _ok(at)
    assert any("No feature's label or top tokens match" in i.value for i in at.info)
