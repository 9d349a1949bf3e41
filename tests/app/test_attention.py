"""Attention page: every number drawn equals the engine's attention tensors."""

from __future__ import annotations

import io
import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from tfm import analysis
from tfm.text.token_view import token_labels
from ui import models
from tfm.viz.attention import plotly_text

from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP, chart_by_title, charts, decode, open_page

PROMPT = "The cat sat on the mat. The cat sat on the hat. The dog ran to the cat."
RTOL, ATOL = 1e-5, 1e-7


def engine(prompt: str):
    """The default model's own forward of the prompt, computed here, not by the page."""
    lm = models.load_lm(models.default_model_spec(), "cpu")
    ids = lm.tokenizer.encode(prompt)[-lm.config.context_length :]
    with torch.inference_mode():
        out = lm.model(torch.tensor([ids]), trace=True)
    return lm, ids, out.trace


def masked_expected(m: torch.Tensor) -> np.ndarray:
    """Lower triangle of m, NaN above the diagonal (keys after the query)."""
    e = m.float().numpy().astype(np.float32, copy=True)
    t = e.shape[-1]
    e[..., np.triu(np.ones((t, t), dtype=bool), 1)] = np.nan
    return e


def assert_matrix(z, expected: np.ndarray, exact: bool = False) -> None:
    z = np.asarray(decode(z), dtype=np.float64)
    assert z.shape == expected.shape
    assert np.array_equal(np.isnan(z), np.isnan(expected)), "masked cells differ"
    assert np.isnan(z[np.triu_indices(z.shape[0], 1)]).all(), "a key after its query is not masked"
    if exact:
        np.testing.assert_array_equal(z[~np.isnan(z)], expected[~np.isnan(expected)].astype(np.float64))
    np.testing.assert_allclose(z, expected, rtol=RTOL, atol=ATOL, equal_nan=True)


def single(at):
    figs = [f for f in charts(at) if "query × key" in f["layout"]["title"]["text"]]
    assert len(figs) == 1, [f["layout"]["title"]["text"] for f in charts(at)]
    return figs[0]


def assert_valid_figures(at) -> None:
    """The page builds figures without plotly's (slow) validation: validate what it drew here."""
    figs = charts(at)
    assert figs
    for fig in figs:
        go.Figure(fig)  # raises ValueError on any invalid property or value


def set_view(at, view: str):
    at.session_state["attn.view"] = view
    at.run()
    assert not at.exception, at.exception
    return at


def test_single_head_equals_engine_and_changes_with_layer_and_head():
    lm, ids, trace = engine(PROMPT)
    at = open_page("attention", PROMPT)
    fig = single(at)
    assert "Layer 0, head 0" in fig["layout"]["title"]["text"]
    assert_matrix(fig["data"][0]["z"], masked_expected(trace["blocks.0.attn.pattern"][0, 0]))
    labels = [plotly_text(s) for s in token_labels(lm.tokenizer, ids)]
    assert list(fig["data"][0]["x"]) == labels and list(fig["data"][0]["y"]) == labels
    assert "query" in fig["data"][0]["hovertemplate"] and "key" in fig["data"][0]["hovertemplate"]
    # weight 0 is drawn light and weight 1 dark, whatever plotly.js would make of a scale name
    brightness = [sum(map(int, c[c.index("(") + 1 : -1].split(","))) for _, c in fig["data"][0]["colorscale"]]
    assert brightness == sorted(brightness, reverse=True) and brightness[0] > 700 > 300 > brightness[-1]

    n_layer, n_head = lm.config.n_layer, lm.config.n_head
    layer, head = n_layer - 1, n_head - 1
    at.select_slider(key="attn.layer").set_value(layer).run()
    at.select_slider(key="attn.head").set_value(head).run()
    assert not at.exception, at.exception
    fig = single(at)
    assert f"Layer {layer}, head {head}" in fig["layout"]["title"]["text"]
    assert_matrix(fig["data"][0]["z"], masked_expected(trace[f"blocks.{layer}.attn.pattern"][0, head]))
    assert at.query_params["layer"] == str(layer) and at.query_params["head"] == str(head)


@pytest.mark.parametrize("mode", ["mean", "max", "rollout"])
def test_aggregations_equal_direct_computation(mode):
    lm, ids, trace = engine(PROMPT)
    layer = min(2, lm.config.n_layer - 1)
    at = open_page("attention", PROMPT)
    at.select_slider(key="attn.layer").set_value(layer).run()
    at.radio(key="attn.mode").set_value(mode).run()
    assert not at.exception, at.exception
    pat = trace[f"blocks.{layer}.attn.pattern"][0]
    direct = {
        "mean": lambda: pat.sum(0) / pat.shape[0],
        "max": lambda: torch.stack(list(pat)).max(0).values,
        "rollout": lambda: analysis.rollout(trace)[layer],
    }[mode]()
    assert_matrix(single(at)["data"][0]["z"], masked_expected(direct))


def test_rollout_is_the_product_of_residual_mixed_layers():
    """Independent of tfm.analysis: 0.5 * mean head + 0.5 * I, rows renormalised, multiplied in order."""
    lm, ids, trace = engine(PROMPT)
    at = open_page("attention", PROMPT)
    at.select_slider(key="attn.layer").set_value(1).run()
    at.radio(key="attn.mode").set_value("rollout").run()
    acc = torch.eye(len(ids), dtype=torch.float64)
    for layer in range(2):
        a = 0.5 * trace[f"blocks.{layer}.attn.pattern"][0].double().mean(0) + 0.5 * torch.eye(len(ids))
        acc = (a / a.sum(-1, keepdim=True)) @ acc
    z = decode(single(at)["data"][0]["z"])
    np.testing.assert_allclose(z, masked_expected(acc), rtol=1e-4, atol=1e-6)


def test_hide_first_token_renormalises_rows():
    lm, ids, trace = engine(PROMPT)
    at = open_page("attention", PROMPT)
    at.select_slider(key="attn.head").set_value(1).run()
    at.checkbox(key="attn.hide_first").check().run()
    assert not at.exception, at.exception
    fig = single(at)
    p = trace["blocks.0.attn.pattern"][0, 1].double()
    # rows sum to 1, so dropping key 0 and renormalising is p[q, k] / (1 - p[q, 0]), for q, k >= 1
    expected = (p / (1 - p[:, :1]))[1:, 1:]
    assert_matrix(fig["data"][0]["z"], masked_expected(expected))
    assert list(fig["data"][0]["x"])[0].endswith("·1"), "position 0 should be hidden"


def test_log_colour_scale_keeps_exact_weights_for_hover():
    lm, ids, trace = engine(PROMPT)
    at = open_page("attention", PROMPT)
    at.checkbox(key="attn.log").check().run()
    trace0 = single(at)["data"][0]
    expected = masked_expected(trace["blocks.0.attn.pattern"][0, 0])
    np.testing.assert_allclose(decode(trace0["customdata"]), expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(decode(trace0["z"]), np.log10(expected), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_long_prompt_shows_a_window_of_positions():
    prompt = " ".join(f"word{i % 37} and more text" for i in range(120))
    lm, ids, trace = engine(prompt)
    assert len(ids) >= 200
    at = open_page("attention", prompt)
    t = len(ids)
    fig = single(at)
    pat = trace["blocks.0.attn.pattern"][0, 0]
    assert_matrix(fig["data"][0]["z"], masked_expected(pat[t - 64 :, t - 64 :]))
    at.slider(key="attn.window").set_value((10, 49)).run()
    assert not at.exception, at.exception
    assert_matrix(single(at)["data"][0]["z"], masked_expected(pat[10:50, 10:50]))
    at.slider(key="attn.window").set_value((0, t - 1)).run()  # too wide: the last 64 of the range
    assert_matrix(single(at)["data"][0]["z"], masked_expected(pat[t - 64 :, t - 64 :]))
    assert any("At most 64" in c.value for c in at.caption)


def test_model_view_cells_equal_each_head_and_open_a_head():
    lm, ids, trace = engine(PROMPT)
    at = set_view(open_page("attention", PROMPT), "All heads")
    fig = chart_by_title(at, "Every head")
    big = decode(fig["data"][0]["z"])
    t, step = len(ids), len(ids) + 1
    for layer in range(lm.config.n_layer):
        for head in range(lm.config.n_head):
            cell = big[layer * step : layer * step + t, head * step : head * step + t]
            expected = masked_expected(trace[f"blocks.{layer}.attn.pattern"][0, head])
            np.testing.assert_allclose(cell, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    at.selectbox(key="attn.open").set_value((1, 2)).run()
    assert not at.exception, at.exception
    assert at.session_state["attn.view"] == "Pattern"
    fig = single(at)
    assert "Layer 1, head 2" in fig["layout"]["title"]["text"]
    assert_matrix(fig["data"][0]["z"], masked_expected(trace["blocks.1.attn.pattern"][0, 2]))


def test_head_view_lines_carry_the_weights_of_the_chosen_token():
    lm, ids, trace = engine(PROMPT)
    at = set_view(open_page("attention", PROMPT), "Head view")
    at.multiselect(key="attn.hv_heads").set_value([0, 2]).run()
    tok = len(ids) - 1
    at.selectbox(key="attn.hv_token").set_value(tok).run()
    assert not at.exception, at.exception
    fig = chart_by_title(at, "who looks at whom")
    for head in (0, 2):
        marks = [d for d in fig["data"] if d.get("name") == f"head {head} weights"]
        assert len(marks) == 1
        data = decode(marks[0]["customdata"])
        order = np.argsort(data[:, 0])
        expected = trace["blocks.0.attn.pattern"][0, head, tok, : tok + 1].numpy()
        np.testing.assert_array_equal(data[order, 0], np.arange(tok + 1))
        np.testing.assert_allclose(data[order, 1], expected, rtol=RTOL, atol=ATOL)


def test_head_table_equals_head_scores_and_probe():
    lm, ids, trace = engine(PROMPT)
    at = set_view(open_page("attention", PROMPT), "Head table")
    table = at.dataframe(key="attn.table").value
    scores = analysis.head_scores(trace, ids)
    n_rep = min(40, (lm.config.context_length - 1) // 2)
    probe = analysis.induction_probe(lm.model, seq_len=n_rep, bos=lm.tokenizer.eot_id)
    assert len(table) == lm.config.n_layer * lm.config.n_head
    for name in ("entropy", "previous_token", "first_token", "duplicate_token", "induction"):
        np.testing.assert_allclose(table[name].to_numpy(), scores[name].flatten().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(table["repeat_induction"], probe["induction"].flatten().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        table["repeat_previous_token"], probe["previous_token"].flatten().numpy(), rtol=1e-5, atol=1e-7
    )
    assert list(table["head"][:2]) == ["L0 H0", "L0 H1"]
    assert any("induction" in m.value for m in at.markdown), "the scores are explained"


def test_export_contains_the_tensors(downloads):
    captured = downloads
    lm, ids, trace = engine(PROMPT)
    at = open_page("attention", PROMPT)
    at.select_slider(key="attn.layer").set_value(1).run()
    at.radio(key="attn.mode").set_value("mean").run()
    assert not at.exception, at.exception
    data = captured["attn.download"]
    data = data() if callable(data) else data
    npz = np.load(io.BytesIO(data), allow_pickle=False)
    all_pats = torch.stack([trace[f"blocks.{l}.attn.pattern"][0] for l in range(lm.config.n_layer)])
    window = npz["window_positions"]  # the prompt fits one window: every position
    assert window.tolist() == list(range(len(ids)))
    np.testing.assert_allclose(npz["window_patterns"], masked_expected(all_pats), rtol=RTOL, atol=ATOL, equal_nan=True)
    np.testing.assert_allclose(npz["shown"], masked_expected(all_pats[1].mean(0)), rtol=RTOL, atol=ATOL, equal_nan=True)
    assert npz["ids"].tolist() == ids
    assert npz["pieces"].tolist() == [lm.tokenizer.display_piece(t) for t in ids]
    settings = json.loads(str(npz["settings_json"]))
    assert settings["prompt"] == PROMPT and settings["layer"] == 1 and settings["mode"] == "mean"


@pytest.mark.parametrize(
    "prompt",
    ["<img src=x onerror=alert(1)> <b>bold</b> &amp;", "Emoji 🙂🚀 and CJK 你好世界 テスト", "a <|endoftext|> b"],
)
def test_odd_prompts_are_shown_as_text(prompt):
    lm, ids, trace = engine(prompt)
    assert lm.tokenizer.eot_id not in ids, "typed <|endoftext|> must not become the control token"
    at = open_page("attention", prompt)
    fig = single(at)
    labels = token_labels(lm.tokenizer, ids)
    assert list(fig["data"][0]["x"]) == [plotly_text(s) for s in labels]
    assert not any("<" in s for s in fig["data"][0]["x"]), "a raw '<' would be read by plotly as a tag"
    assert_matrix(fig["data"][0]["z"], masked_expected(trace["blocks.0.attn.pattern"][0, 0]))


def test_every_chart_is_a_valid_plotly_figure():
    at = open_page("attention", PROMPT)
    assert_valid_figures(at)
    for key in ("attn.log", "attn.hide_first"):
        at.checkbox(key=key).check().run()
    for mode in ("mean", "rollout"):
        at.radio(key="attn.mode").set_value(mode).run()
        assert_valid_figures(at)
    set_view(at, "All heads")
    assert_valid_figures(at)
    set_view(at, "Head view")
    at.multiselect(key="attn.hv_heads").set_value([0, 1, 2]).run()
    assert_valid_figures(at)
    at.selectbox(key="attn.hv_token").set_value(5).run()
    assert_valid_figures(at)


def test_a_local_layer_wider_than_the_view_draws_where_its_window_ends():
    """Gemma 3's window (512 keys) is wider than the 64-position square: a local layer also draws
    what the last query reads over every key, equal to the engine's pattern row, 0 left of the window."""
    from tfm.core.config import ModelConfig

    cfg = ModelConfig.preset("tiny").replace(
        pos_encoding="rope",
        norm="rmsnorm",
        n_head=4,
        n_kv_head=1,
        head_dim=16,
        qk_norm=True,
        sliding_window=70,
        local_layers=(0,),
        context_length=256,
    )
    spec = models.random_spec(cfg, seed=4)
    lm = models.load_lm(spec, "cpu")
    at = AppTest.from_file(APP, default_timeout=120)
    prompt = " ".join(f"w{i % 23}" for i in range(60))
    at.query_params.update({"prompt": prompt, "model": spec, "layer": "0", "head": "2"})
    at.switch_page("pages/attention.py").run()
    assert not at.exception, at.exception
    ids = lm.tokenizer.prompt_ids(prompt)
    t = len(ids)
    assert t > 70 + 1
    with torch.inference_mode():
        want = lm.model(torch.tensor([ids]), trace=True, lazy=False).trace.pattern(0)[2, -1]  # (T,)
    fig = chart_by_title(at, f"what query {t - 1} reads, every key")
    got = np.asarray(decode(fig["data"][0]["y"]), dtype=np.float64)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-7)
    assert (got[: t - 70] == 0).all() and (got[t - 70 :] > 0).all()
    assert "outside the 70-key window" in json.dumps(fig["layout"])
    at.session_state["attn.layer"] = at.session_state["keep.attn.layer"] = 1  # a global layer: no such chart
    at.run()
    assert not any("every key" in str(f["layout"].get("title")) for f in charts(at))
