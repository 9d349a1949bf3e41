"""The example buttons (ui/examples.py): a click puts the example's prompt in the sidebar and
opens the page on what it claims, and the page's own chart shows the claimed number (its head's
induction score, the row where the answer surfaces, the feature's activation, the logit
difference), recomputed here from what the page drew."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tfm.analysis.dictionaries import features as FT
from tfm.teach import examples as X
from tfm.viz.sampling import esc
from ui import cache, models

from tests.app.conftest import as_shown, chart_by_title, decode, open_page
from tests.app.matrix import open_cell


def engine_offer(spec: str, page: str) -> X.Offer:
    """The page's examples computed here, not by the app."""
    lm = models.load_lm(spec, "cpu")
    return X.for_page(lm, page, FT.bundled(lm, spec) if page == "features" else None)


def press(at, page: str, example: X.Example, i: int = 0):
    button = at.button(key=f"{page}.example.{i}")
    assert as_shown(button.label) == f"Try: {example.label}"
    button.click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["sidebar.prompt"] == example.prompt
    assert at.text_area(key="sidebar.prompt").value == example.prompt
    assert any(as_shown(c.value) == f"Example: {example.why}" for c in at.caption)
    return at


def later_copy_score(z: np.ndarray, ids) -> float:
    """A head's induction score on the later copies, from the (T, T) matrix the page drew."""
    rows = [(q, [j + 1 for j in range(q) if ids[j] == ids[q]]) for q in range(len(ids))]
    return float(np.mean([np.nansum(z[q, keys]) for q, keys in rows if keys]))


def check_attention(at, spec: str) -> float:
    ex = engine_offer(spec, "attention").examples[0]
    press(at, "attention", ex)
    layer, head = ex.settings["layer"], ex.settings["head"]
    assert (at.session_state["attn.layer"], at.session_state["attn.head"]) == (layer, head)
    fig = chart_by_title(at, f"Layer {layer}, head {head}: query × key")
    ids = models.load_lm(spec, "cpu").tokenizer.prompt_ids(ex.prompt)
    drawn = later_copy_score(np.asarray(decode(fig["data"][0]["z"]), dtype=np.float64), ids)
    assert drawn == pytest.approx(ex.score, abs=1e-5)
    return drawn


def test_attention_example_opens_on_its_induction_head():
    at = open_page("attention")
    assert cache.is_cached("derived", "default", "cpu", "examples", "attention", False)  # once per model
    assert check_attention(at, "default") >= 0.5
    ex = engine_offer("default", "attention").examples[0]
    assert (at.query_params["layer"], at.query_params["head"]) == (str(ex.settings["layer"]), str(ex.settings["head"]))


def test_logit_lens_example_shows_the_answer_surfacing_at_its_row():
    lm = models.load_lm("default", "cpu")
    at = open_page("logit_lens")
    for i, ex in enumerate(engine_offer("default", "logit_lens").examples):
        press(at, "logit_lens", ex, i)
        grid = chart_by_title(at, "Logit lens")["data"][0]
        answer = esc(lm.tokenizer.display_piece(lm.tokenizer.encode(dict(X.LENS_TEXTS)[ex.prompt])[0]))
        last = [row[ex.settings["position"]].split("<br>")[1:] for row in grid["customdata"]]  # top 5 per row
        inside = [answer in [line.rsplit(": ", 1)[0] for line in top5] for top5 in last]
        assert inside[ex.settings["row"] :] == [True] * (len(inside) - ex.settings["row"])
        assert not inside[ex.settings["row"] - 1]
        assert grid["text"][-1][ex.settings["position"]] == answer  # the model's top prediction


def test_features_example_opens_on_its_feature():
    lm = models.load_lm("default", "cpu")
    fs = FT.bundled(lm, "default")
    at = open_page("features")
    for i, ex in enumerate(engine_offer("default", "features").examples):
        press(at, "features", ex, i)
        feature = ex.settings["feature"]
        assert at.session_state["features.feature"] == feature
        acts = decode(chart_by_title(at, f"Feature {feature} on each token")["data"][0]["y"])
        assert int(np.argmax(acts)) == ex.settings["position"]
        assert acts[ex.settings["position"]] / float(fs.data["hist_max"][feature]) == pytest.approx(ex.score, abs=1e-5)


def test_why_without_an_example_says_what_was_measured():
    """The bundled model prefers no indirect object: no button, one line with the best number."""
    offer = engine_offer("default", "why")
    assert not offer.examples and offer.measured
    at = open_page("why")
    assert not [b for b in at.button if ".example." in (b.key or "")]
    line = [as_shown(c.value) for c in at.caption if "No example prompt" in c.value]
    assert line == [
        f"No example prompt here for this model: none of the candidates shows {offer.bar}. "
        f"The best: {offer.measured[0].why}"
    ]


def test_no_sae_no_example_buttons():
    at = open_cell("features", "random:tfm-small")
    assert not [b for b in at.button if ".example." in (b.key or "")]
    assert not [c for c in at.caption if "No example prompt" in c.value]


@pytest.mark.slow
def test_smollm2_attention_and_why_examples():
    at = open_cell("attention", "smollm2")
    assert check_attention(at, "smollm2") >= 0.5
    ex = engine_offer("smollm2", "why").examples[0]
    at.switch_page("pages/why.py").run()
    press(at, "why", ex)
    assert (at.session_state["why.token"], at.session_state["why.versus"]) == (
        ex.settings["token"],
        ex.settings["versus"],
    )
    shown = [m.value for m in at.markdown if "Explaining" in m.value]
    target = float(re.search(r"= \*\*(-?[\d.]+)\*\*", shown[0]).group(1))
    assert target == pytest.approx(ex.score, abs=1e-3)
