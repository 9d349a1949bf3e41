"""Why-this-token page: every number drawn equals the engine's attribution, ablation sweep,
intervention and patching results; bad input gives a message, never a traceback."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfm.analysis import attribution, heads, patching
from tfm.core import edits as E
from tfm.core.trace_names import head_label
from ui import models, sidebar

from tests.app.conftest import chart_by_title, decode, open_page, use_random


def engine(prompt: str = sidebar.DEFAULT_PROMPT):
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)
    return lm, ids, attribution.direct(lm, ids)


def tab(at, name: str):
    at.session_state["why.tab"] = name
    at.run()
    assert not at.exception, at.exception
    return at


def test_attribution_charts_equal_the_engine():
    at = open_page("why")
    lm, ids, attr = engine()
    assert not at.error
    heat = chart_by_title(at, "Every head's direct contribution")["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), attr.heads.numpy(), rtol=1e-6, atol=1e-9)
    bars = chart_by_title(at, "Top contributions")["data"][0]
    order = np.argsort(-np.abs(attr.values.numpy()))[:15][::-1]
    np.testing.assert_allclose(decode(bars["x"]), attr.values.numpy()[order], rtol=1e-6)
    layer, head = divmod(int(attr.heads.abs().argmax()), lm.config.n_head)
    src = chart_by_title(at, f"L{layer} H{head}:")["data"][0]
    np.testing.assert_allclose(decode(src["y"]), attr.by_source(layer, head).numpy(), rtol=1e-6, atol=1e-9)
    at.selectbox(key="why.head").set_value((0, 1)).run()
    src = chart_by_title(at, "L0 H1:")["data"][0]
    np.testing.assert_allclose(decode(src["y"]), attr.by_source(0, 1).numpy(), rtol=1e-6, atol=1e-9)
    probe = heads.probe_settings(lm)  # the probe Home names its induction head on: the same head, same score
    check = patching.induction_check(lm, probe.seq_len, probe.seed, probe.bos)
    layer, head, score = heads.strongest_heads(lm)["induction"]
    text = " ".join(m.value for m in at.markdown)
    assert f"induction head is **{head_label(layer, head)}** (score {score:.2f})" in text
    assert (check.layer, check.head) == (layer, head) and check.score == pytest.approx(score, abs=1e-6)
    assert f"**{check.loss_clean:.3f}** as is, **{check.loss_ablated:.3f}**" in text


def test_ablation_sweep_and_intervention_equal_the_engine():
    lm, ids, attr = engine()
    at = tab(open_page("why"), "Attribution vs ablation")
    sweep = patching.ablation_sweep(lm, ids, patching.Metric(len(ids) - 1, attr.token))
    heat = chart_by_title(at, "Logit lost when each head")["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), -sweep.head_effects.numpy(), rtol=1e-5, atol=1e-5)
    bars = chart_by_title(at, "attribution beside ablation")["data"]
    att = torch.cat([attr.heads.flatten(), attr.mlps]).numpy()
    order = np.argsort(-np.abs(att))[:15][::-1]
    np.testing.assert_allclose(decode(bars[0]["x"]), att[order], rtol=1e-6)
    eff = torch.cat([sweep.head_effects.flatten(), sweep.mlp_effects]).numpy()
    np.testing.assert_allclose(decode(bars[1]["customdata"]), eff[order], rtol=1e-4, atol=1e-5)
    at = tab(at, "Intervene")
    at.multiselect(key="why.abl_heads").set_value(["L5 H5", "L3 H3"]).run()
    assert not at.exception
    fig = chart_by_title(at, "before and after")
    with torch.no_grad():
        before = lm.model(torch.tensor([ids])).logits[0, -1].softmax(-1)
        after = lm.model(torch.tensor([ids]), edits=[E.AblateHead(5, 5), E.AblateHead(3, 3)]).logits[0, -1].softmax(-1)
    shown = [lm.tokenizer.display_piece(i) for i in before.topk(8).indices.tolist()]
    assert fig["data"][0]["x"][:8] == shown
    np.testing.assert_allclose(decode(fig["data"][0]["y"])[:8], before.topk(8).values.numpy(), rtol=1e-4)
    ids_shown = list(dict.fromkeys(before.topk(8).indices.tolist() + after.topk(8).indices.tolist() + [attr.token]))
    np.testing.assert_allclose(decode(fig["data"][1]["y"]), after[ids_shown].numpy(), rtol=1e-4, atol=1e-7)
    at.multiselect(key="why.abl_heads").set_value([head_label(l, h) for l in range(6) for h in range(6)]).run()
    assert not at.exception and at.warning


def test_patching_panel_and_bad_inputs():
    lm = models.load_lm(models.default_model_spec(), "cpu")
    at = tab(open_page("why"), "Activation patching")
    tok = lm.tokenizer
    c, x = tok.encode(at.session_state["why.clean"]), tok.encode(at.session_state["why.corrupt"])
    metric = patching.Metric(len(c) - 1, tok.encode(" Lily")[0], tok.encode(" Tom")[0])
    res = patching.patch_prompts(lm, c, x, metric)
    heads = chart_by_title(at, "Patching each head")["data"][0]
    np.testing.assert_allclose(decode(heads["z"]), res.heads.numpy(), rtol=1e-5, atol=1e-6)
    resid = chart_by_title(at, "Patching the residual stream")["data"][0]
    np.testing.assert_allclose(decode(resid["z"]), res.resid.numpy(), rtol=1e-5, atol=1e-6)
    at.text_input(key="why.corrupt").set_value("Tom gave the ball to Lily.").run()
    assert not at.exception and "same token length" in at.error[0].value
    at.text_input(key="why.corrupt").set_value("Tom gave the ball to Lily. Then Lily gave it to")
    at.text_input(key="why.answer").set_value(" Lilyxyzq").run()
    assert not at.exception and "not one token" in at.error[0].value
    at = open_page("why")
    at.text_input(key="why.token").set_value("<img src=x onerror=alert(1)>").run()
    assert not at.exception and "not one token" in at.error[0].value


@pytest.mark.parametrize("tab_name", ["MLP neurons", "Contribution graph"])
def test_other_tabs_on_a_random_model(tab_name):
    at = open_page("why", "The cat sat on the mat. The cat")
    use_random(at, "tiny")
    at = tab(at, tab_name)
    assert not at.error
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.encode("The cat sat on the mat. The cat")[-lm.config.context_length :]
    attr = attribution.direct(lm, ids)
    if tab_name == "MLP neurons":
        table = at.dataframe[0].value
        top = attribution.top_neurons(lm, attr, k=12)
        np.testing.assert_allclose(table["contribution"].to_numpy(), [n.value for n in top], rtol=1e-6)
        at.multiselect(key="why.neurons_off").set_value([table["neuron"][0]]).run()
        assert not at.exception and chart_by_title(at, "before and after")
    else:
        assert chart_by_title(at, "Contribution graph")


def test_post_norm_model_is_refused_with_a_message():
    at = open_page("why")
    use_random(at, "tiny", norm_placement="post")
    assert not at.exception and "pre-norm" in at.error[0].value


def test_position_and_link_settings():
    lm, ids, _ = engine()
    at = open_page("why")
    at.number_input(key="why.pos").set_value(3).run()
    attr = attribution.direct(lm, ids, position=3)
    heat = chart_by_title(at, "Every head's direct contribution")["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), attr.heads.numpy(), rtol=1e-6, atol=1e-9)
    assert at.query_params["pos"] == ["3"] or at.query_params["pos"] == "3"
    from streamlit.testing.v1 import AppTest
    from tests.app.conftest import APP

    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["pos"] = "999"
    at.run()
    at.switch_page("pages/why.py").run()
    assert not at.exception and at.number_input(key="why.pos").value == len(ids) - 1


def test_patching_and_tab_from_a_link():
    from streamlit.testing.v1 import AppTest
    from tests.app.conftest import APP

    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(
        {
            "tab": "Activation patching",
            "clean": "The cat saw the dog",
            "corrupt": "The dog saw the cat",
            "answer": " dog",
            "wrong": " cat",
        }
    )
    at.run()
    at.switch_page("pages/why.py").run()
    assert not at.exception
    lm = models.load_lm(models.default_model_spec(), "cpu")
    tok = lm.tokenizer
    c, x = tok.encode("The cat saw the dog"), tok.encode("The dog saw the cat")
    res = patching.patch_prompts(lm, c, x, patching.Metric(len(c) - 1, tok.encode(" dog")[0], tok.encode(" cat")[0]))
    heads = chart_by_title(at, "Patching each head")["data"][0]
    np.testing.assert_allclose(decode(heads["z"]), res.heads.numpy(), rtol=1e-5, atol=1e-6)
    at2 = AppTest.from_file(APP, default_timeout=120)
    at2.query_params["tab"] = "**nonsense**"
    at2.run()
    at2.switch_page("pages/why.py").run()
    assert not at2.exception and chart_by_title(at2, "Top contributions")
    # the link's tab is named back as plain text (Markdown escaped), as the Tour names a bad step
    assert [w.value for w in at2.warning] == ["There is no tab '\\*\\*nonsense\\*\\*'; showing Attribution."]
    at2.run()  # the next run shows no warning: the page opened its first tab
    assert not at2.warning


def test_an_empty_token_versus_the_top_token_is_an_info_as_on_the_graph_page():
    """Empty 'explain' means the top prediction; typing that same token as the versus token asks
    for logit(t) - logit(t): the page says so in an info (as the Attribution graph page does for
    two equal tokens), not a red error."""
    lm, ids, attr = engine()
    at = open_page("why")
    at.text_input(key="why.versus").set_value(lm.tokenizer.decode([attr.token])).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("a token's logit minus its own is always 0" in i.value for i in at.info), [i.value for i in at.info]
