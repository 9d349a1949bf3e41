"""Experiments page: every chart shows the numbers tfm.teach.experiments computes."""

from __future__ import annotations

import numpy as np
import pytest

from tfm.teach import experiments as ex
from tfm.teach.toy import torch_threads

from tests.app.conftest import chart_by_title, decode, open_page


def frame_with(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


@pytest.fixture(scope="module")
def page():
    at = open_page("experiments")
    assert not at.exception, at.exception
    return at


def test_softmax_residual_and_depth_charts_equal_the_experiments(page):
    with torch_threads(1):
        soft = ex.softmax_scaling()
        res = ex.residual_gradients(n_layers=50)
        depth = ex.norm_placement_depth(n_layer=12)
    fig = chart_by_title(page, "Softmax over 32 keys")
    ys = [decode(t["y"]) for t in fig["data"]]  # panels x {scaled, unscaled}
    for i, key in enumerate(("max_weight", "entropy", "grad_norm")):
        np.testing.assert_allclose(ys[2 * i], soft["scaled"][key].numpy(), rtol=1e-6)
        np.testing.assert_allclose(ys[2 * i + 1], soft["unscaled"][key].numpy(), rtol=1e-6)
    fig = chart_by_title(page, "Gradient norm per block in a 50-block stack")
    np.testing.assert_allclose(decode(fig["data"][0]["y"]), res["residual"].numpy(), rtol=1e-5)
    np.testing.assert_allclose(decode(fig["data"][1]["y"]), res["plain"].numpy(), rtol=1e-5)
    assert any(f"{res['plain_first']:.3g}" in m.value for m in page.markdown)
    fig = chart_by_title(page, "Pre-norm vs post-norm")
    for i, (variant, key) in enumerate(
        [("pre", "resid_norm"), ("pre", "grad_norm"), ("post", "resid_norm"), ("post", "grad_norm")]
    ):
        np.testing.assert_allclose(decode(fig["data"][i]["y"]), getattr(depth[variant], key).numpy(), rtol=1e-5)


def test_norm_axes_timing_and_shapes(page):
    axes = ex.norm_axes()
    fig = chart_by_title(page, "Same tensor, two normalisations")
    for trace, key in zip(fig["data"], ("x", "layernorm", "batchnorm")):
        np.testing.assert_allclose(decode(trace["z"]), axes[key].numpy(), rtol=1e-6)
    stats = frame_with(page, "LayerNorm output")
    assert stats["LayerNorm output"][1] == ", ".join(f"{v:+.3f}" for v in axes["layernorm_row_std"].tolist())
    fig = chart_by_title(page, "Time per call")
    medians = decode(fig["data"][0]["y"])
    for i, median in enumerate(medians):  # bar = median of the dots drawn
        assert median == pytest.approx(np.median(decode(fig["data"][i + 1]["y"])))
    notice = next(m.value for m in page.markdown if "RMSNorm skips the mean" in m.value)
    assert all(f"{m:.3f}" in notice for m in medians)  # the sentence quotes the same run
    table = frame_with(page, "tensor")
    want = ex.head_split_shapes(64, 4)["steps"]
    assert list(table["tensor"]) == [s["name"] for s in want]
    assert list(table["shape"]) == [" × ".join(map(str, s["shape"])) for s in want]


def test_mask_chart_follows_the_controls(page):
    def check(n_pad, causal):
        res = ex.mask_demo(t=6, n_pad=n_pad, causal=causal)
        fig = chart_by_title(page, "One head, step by step")
        np.testing.assert_array_equal(decode(fig["data"][0]["z"]), res["mask"].numpy().astype(float))
        masked = decode(fig["data"][2]["z"]).astype(float)
        assert np.all(np.isnan(masked) == ~res["mask"].numpy())  # -inf drawn as empty cells
        pattern = decode(fig["data"][3]["z"])
        np.testing.assert_allclose(pattern, res["pattern"].numpy(), rtol=1e-6)
        assert np.all(pattern[~res["mask"].numpy()] == 0)

    check(2, True)
    page.slider(key="exp.n_pad").set_value(3).run()
    page.checkbox(key="exp.causal").uncheck().run()
    assert not page.exception
    check(3, False)


def test_invalid_head_count_shows_an_error(page):
    page.number_input(key="exp.n_head").set_value(5).run()
    assert not page.exception
    assert any("not divisible by n_head=5" in e.value for e in page.error)
    page.number_input(key="exp.d_model").set_value(80).run()
    assert not page.exception and not page.error
    table = frame_with(page, "tensor")
    assert list(table["shape"])[2] == "1 × 5 × 5 × 16"
