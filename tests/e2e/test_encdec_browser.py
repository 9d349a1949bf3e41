"""Browser: train the reversal model on the page, check the drawn cross-attention against the
downloaded model's own tensors, and load that download back through the upload box."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import expect

from tfm.teach import experiments as ex
from tfm.teach import toy
from tfm.teach.toy import torch_threads

from tests.e2e.conftest import shot, wait_drawn, wait_idle

STEPS = 250
GRID = '[data-testid="stPlotlyChart"] .js-plotly-plot'


def grid_plot(page, title: str):
    plots = page.locator(GRID).filter(has=page.locator(".gtitle", has_text=title))
    plots.first.wait_for()
    return plots.first


def test_train_reversal_and_read_the_alignment(page, app_url, tmp_path):
    acc = _train_on_the_page(page, app_url)
    drawn = _drawn_cross_attention(page, layer=1)
    path = _download_the_model(page, tmp_path / "model.zip")
    model, spec = toy.from_zip(path.read_bytes())
    assert spec.task == "reverse"
    assert toy.exact_match(model, spec, n=500) == pytest.approx(acc, abs=1e-9)  # acc was read from "99.4%"
    text = page.get_by_label(re.compile("^Digits")).input_value()
    batch = toy.make_batch(spec, [toy.encode_digits(text)])
    answer, _, trace = toy.answer_trace(model, batch)
    want = trace["dec.blocks.1.cross.pattern"][0].numpy()
    np.testing.assert_allclose(drawn, want, rtol=1e-5, atol=1e-7)
    n = len(text)
    assert answer == text[::-1]
    anti = want[:, np.arange(n), n - 1 - np.arange(n)].mean(-1)  # weight on source n-1-i per head
    assert anti.max() > 0.5

    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(path))
    status = page.get_by_test_id("stAlert").filter(has_text="exact-match accuracy")
    expect(status).to_contain_text("loaded from a saved copy", timeout=180_000)  # the rerun starts after the upload
    wait_idle(page, timeout=180_000)
    assert f"{acc:.1%}" in status.inner_text()
    shot(page, "encdec_loaded_from_zip")


def _train_on_the_page(page, app_url) -> float:
    """Open the page from the root's sidebar link, as a user would (direct first requests for a
    page are covered by test_routing_browser.py), train STEPS steps; the accuracy it reports."""
    page.set_viewport_size({"width": 1400, "height": 2400})  # Streamlit scrolls inside: tall shows all
    page.goto(app_url)
    wait_idle(page, timeout=180_000)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Encoder-decoder, trained live", exact=True).click()
    expect(page.get_by_role("button", name="Train a fresh model")).to_be_visible(timeout=120_000)
    wait_idle(page)
    steps = page.get_by_role("spinbutton", name="Training steps")
    expect(steps).to_have_value("400")  # the page's default
    steps.fill(str(STEPS))
    steps.press("Enter")
    wait_idle(page)
    expect(steps).to_have_value(str(STEPS))
    page.get_by_role("button", name="Train a fresh model").click()
    page.get_by_test_id("stProgress").first.wait_for(timeout=120_000)  # the live progress bar
    wait_idle(page, timeout=900_000)
    success = page.get_by_test_id("stAlert").filter(has_text="exact-match accuracy").inner_text()
    acc = float(re.search(r"accuracy ([\d.]+)%", success).group(1)) / 100
    assert f"trained {STEPS} steps" in success and acc >= 0.95
    return acc


def _drawn_cross_attention(page, layer: int) -> np.ndarray:
    """Pick a decoder layer; the cross-attention grid's numbers as drawn, (heads, T, S)."""
    page.get_by_test_id("stSelectbox").filter(has_text="Decoder layer").click()
    page.get_by_role("option", name=str(layer), exact=True).click()
    wait_idle(page)
    plot = grid_plot(page, f"Cross-attention, decoder layer {layer}")
    plot.scroll_into_view_if_needed()
    shot(page, "encdec_trained_reversal")
    return np.array(plot.evaluate("el => el._fullData.map(d => Array.from(d.z, r => Array.from(r)))"))


def _download_the_model(page, path):
    """The page's "Download this model" zip, saved at `path`."""
    with page.expect_download() as dl:
        page.get_by_text("Save or load a trained model").click()
        page.get_by_role("button", name=re.compile("Download this model")).click()
    dl.value.save_as(path)
    return path


def test_experiments_page_draws_the_experiments(page, app_url):
    page.set_viewport_size({"width": 1400, "height": 5000})
    page.goto(app_url)
    wait_idle(page, timeout=180_000)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Experiments", exact=True).click()
    last = page.locator(".gtitle", has_text="One head, step by step").first
    expect(last).to_be_visible(timeout=300_000)
    wait_idle(page, timeout=180_000)
    wait_drawn(page)
    shot(page, "experiments")
    res = ex.mask_demo(t=6, n_pad=2, causal=True)
    plot = grid_plot(page, "One head, step by step")
    drawn = np.array(plot.evaluate("el => Array.from(el._fullData[3].z, r => Array.from(r))"), dtype=float)
    np.testing.assert_allclose(drawn, res["pattern"].numpy(), rtol=1e-6)
    with torch_threads(1):
        soft = ex.softmax_scaling()
    plot = grid_plot(page, "Softmax over 32 keys")
    drawn = np.array(plot.evaluate("el => Array.from(el._fullData[1].y)"), dtype=float)
    np.testing.assert_allclose(drawn, soft["unscaled"]["max_weight"].numpy(), rtol=1e-6)
