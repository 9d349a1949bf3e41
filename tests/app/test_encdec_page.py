"""Encoder-decoder page: train a few steps with the button; charts equal the engine's tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tfm.teach import toy
from tfm.teach.encdec import EncoderDecoder

from tests.app.conftest import allow_models, chart_by_title, decode, open_page

pytestmark = pytest.mark.slow  # a model trained on the page: CI only (the quick tier's matrix opens the page)

STEPS = 20


@pytest.fixture(scope="module")
def reference():
    """The same training the page runs (seed 0), done here independently."""
    return toy.train(toy.ToySpec("reverse"), STEPS, seed=0)


@pytest.fixture(scope="module")
def trained():
    at = open_page("encdec")
    assert any("Train a fresh model" in i.value for i in at.info)
    at.selectbox(key="encdec.task").set_value("reverse").run()
    at.number_input(key="encdec.steps").set_value(STEPS).run()
    at.button(key="encdec.train").click().run()
    assert not at.exception, at.exception
    return at


def heads(fig) -> np.ndarray:
    return np.stack([decode(t["z"]) for t in fig["data"]])


def test_training_shows_the_loss_and_accuracy(trained, reference):
    at = trained
    fig = chart_by_title(at, "Training loss")
    np.testing.assert_allclose(decode(fig["data"][0]["y"]), reference.losses, rtol=1e-5)
    acc = toy.exact_match(reference.model, reference.spec, n=500)
    assert any(f"trained {STEPS} steps" in s.value and f"{acc:.1%}" in s.value for s in at.success)


def test_cross_attention_grid_is_the_models_trace(trained, reference):
    at = trained
    text = at.text_input(key="encdec.input").value
    batch = toy.make_batch(reference.spec, [toy.encode_digits(text)])
    answer, written, trace = toy.answer_trace(reference.model, batch)
    for layer in (0, 1):
        at.selectbox(key="encdec.layer").set_value(layer).run()
        assert not at.exception
        z = heads(chart_by_title(at, f"Cross-attention, decoder layer {layer}"))
        want = trace[f"dec.blocks.{layer}.cross.pattern"][0].numpy()
        np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-7)
        pad = batch.src_pad[0].numpy()
        assert pad.any() and np.all(z[:, :, pad] == 0)  # padded source columns: exactly 0
    assert any(f"Model's answer: **{answer or '(empty)'}**" in m.value for m in at.markdown)


def test_replay_at_step_zero_is_the_fresh_model(trained, reference):
    at = trained  # a module's page: set what this test reads (under xdist it may run before the others)
    at.selectbox(key="encdec.layer").set_value(1).run()
    at.selectbox(key="encdec.head").set_value(2).run()
    at.select_slider(key="encdec.snapshot").set_value(0).run()
    assert not at.exception
    fresh = EncoderDecoder(reference.spec.model_config())
    fresh.reset_parameters(torch.Generator().manual_seed(0))
    probe = toy.probe_batch(reference.spec)
    n_out = int((probe.tgt_out[0] != toy.PAD).sum())
    want = toy.cross_patterns(fresh.eval(), probe)[1, 2, :n_out].numpy()  # layer 1, head 2
    z = decode(chart_by_title(at, "Step 0: layer 1 head 2")["data"][0]["z"])
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-7)


def test_bad_digits_and_loading(trained, reference, tmp_path):
    allow_models(tmp_path)  # the server's owner allows this folder (as --allow-models would)
    at = trained
    at.text_input(key="encdec.input").set_value("12a<b>").run()
    assert not at.exception and any("digits 0-9 only" in e.value for e in at.error)
    at.text_input(key="encdec.input").set_value("1234567").run()
    at.text_input(key="encdec.folder").set_value(str(tmp_path / "missing")).run()
    at.button(key="encdec.load").click().run()
    assert not at.exception and any("Could not load that model" in e.value for e in at.error)
    sort_model = toy.train(toy.ToySpec("sort"), 3, seed=5)
    toy.save_folder(tmp_path / "sort", sort_model.model, sort_model.spec)
    at.text_input(key="encdec.folder").set_value(str(tmp_path / "sort")).run()
    at.button(key="encdec.load").click().run()
    assert not at.exception
    assert any("**sort** model" in s.value and "loaded from a saved copy" in s.value for s in at.success)
    batch = toy.make_batch(sort_model.spec, [toy.encode_digits("1234567")])
    _, _, trace = toy.answer_trace(sort_model.model, batch)
    z = heads(chart_by_title(at, "Cross-attention, decoder layer"))
    layer = at.selectbox(key="encdec.layer").value
    np.testing.assert_allclose(z, trace[f"dec.blocks.{layer}.cross.pattern"][0].numpy(), rtol=1e-5, atol=1e-7)


def test_model_and_choices_survive_a_page_switch(trained):
    at = trained
    at.selectbox(key="encdec.head").set_value(3).run()
    before = [s.value for s in at.success]
    at.switch_page("pages/tokens.py").run()
    at.switch_page("pages/encdec.py").run()
    assert not at.exception
    assert [s.value for s in at.success] == before  # the session's model is still there
    assert at.selectbox(key="encdec.head").value == 3
