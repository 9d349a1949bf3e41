"""Positional-encodings page: every chart equals the running model's tensors; every variant renders."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfm.analysis import positions
from tfm.core.model import rope_angles, sinusoidal_table
from ui import models

from tests.app.variants import POSITIONS, variants
from tests.app.conftest import chart_by_title, charts, decode, open_page, use_random

PROMPT = "The cat sat on the mat. The cat sat on the"


def engine(at):
    """The page's model (the same cached object) and its prompt ids, computed here."""
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.encode(at.session_state["sidebar.prompt"])[-lm.config.context_length :]
    return lm, ids


def z_of(fig, i: int = 0) -> np.ndarray:
    return decode(fig["data"][i]["z"])


def test_default_model_charts_are_its_own_position_vectors():
    at = open_page("positions", PROMPT)
    lm, ids = engine(at)
    model = lm.model
    table = (model.pos_emb.weight if model.pos_emb is not None else model.pos_table).detach()
    n = at.slider(key="pos.max_pos").value
    assert n == min(128, lm.config.context_length)
    np.testing.assert_array_equal(z_of(chart_by_title(at, "Positional vectors")), table[:n].numpy())
    sim = F.cosine_similarity(table[:n, None], table[None, :n], dim=-1)
    np.testing.assert_allclose(z_of(chart_by_title(at, "Cosine similarity")), sim.numpy(), atol=1e-5)
    pca = chart_by_title(at, "PCA")["data"][1]
    centered = table[:n].double() - table[:n].double().mean(0)
    _, s, vh = torch.linalg.svd(centered, full_matrices=False)
    for axis, comp in (("x", 0), ("y", 1)):  # equal up to the sign of each component
        mine, ref = decode(pca[axis]), (centered @ vh[comp]).numpy()
        np.testing.assert_allclose(mine * np.sign(mine @ ref), ref, atol=1e-4)
    np.testing.assert_array_equal(decode(pca["marker"]["color"]), np.arange(n))
    at.slider(key="pos.max_pos").set_value(40).run()
    assert not at.exception
    np.testing.assert_array_equal(z_of(chart_by_title(at, "Positional vectors")), table[:40].numpy())


def test_permutation_table_shows_the_engine_numbers():
    at = open_page("positions", PROMPT)
    lm, ids = engine(at)
    res = positions.permutation_check(lm.model, ids, 0)
    table = at.table[0].value
    assert table["without positions"].tolist() == [f"{res.full_without:.2e}", f"{res.causal_last_without:.2e}"]
    assert table["with the model's positions"].tolist() == [f"{res.full_with:.2e}", f"{res.causal_last_with:.2e}"]
    assert res.full_without < 1e-6 < res.full_with


def test_sinusoidal_model_shows_its_pos_table_and_waves():
    at = open_page("positions", PROMPT)
    use_random(at, pos_encoding="sinusoidal", context_length=64)
    lm, _ = engine(at)
    n = at.slider(key="pos.max_pos").value
    assert 1 < n <= 64
    table = lm.model.pos_table[:n]
    np.testing.assert_array_equal(z_of(chart_by_title(at, "pos_table buffer")), table.numpy())
    at.multiselect(key="pos.dims").set_value([2, 5]).run()
    waves = chart_by_title(at, "Chosen dimensions")["data"]
    assert [w["name"] for w in waves] == ["dim 2", "dim 5"]
    for w, d in zip(waves, (2, 5)):
        np.testing.assert_array_equal(decode(w["y"]), table[:, d].numpy())


def test_rope_model_shows_the_rotation_angles_it_computes():
    at = open_page("positions", PROMPT)
    use_random(at, pos_encoding="rope")
    lm, ids = engine(at)
    fig = chart_by_title(at, "RoPE rotation angle")
    angles = rope_angles(lm.model.inv_freq, 0, lm.config.context_length)
    np.testing.assert_allclose(decode(fig["data"][0]["customdata"]), angles.numpy(), rtol=1e-6)
    np.testing.assert_allclose(z_of(fig), np.mod(angles.numpy(), 2 * math.pi), atol=1e-5)
    freq = chart_by_title(at, "Rotation speed")["data"][0]
    np.testing.assert_array_equal(decode(freq["y"]), lm.model.inv_freq.numpy())


def test_no_position_model_says_so_and_still_runs_the_check():
    at = open_page("positions", PROMPT)
    use_random(at, pos_encoding="none")
    assert any("no positional encoding" in i.value for i in at.info)
    assert not any("Positional vectors" in str(f["layout"].get("title")) for f in charts(at))
    assert at.table[0].value["with the model's positions"].tolist() == ["no positions in this model"] * 2


def test_formula_explorer_follows_its_sliders():
    at = open_page("positions", PROMPT)
    at.slider(key="pos.d_model").set_value(64)
    at.slider(key="pos.length").set_value(50).run()
    assert not at.exception
    table = sinusoidal_table(50, 64)
    np.testing.assert_array_equal(z_of(chart_by_title(at, "Sinusoidal table, 50 positions")), table.numpy())
    dots = chart_by_title(at, "depends only on the offset")["data"]
    assert [d["name"] for d in dots] == ["p = 0", "p = 12", "p = 25", "Σ cos(k·ωᵢ)"]
    t64 = table.double()
    np.testing.assert_allclose(decode(dots[1]["y"]), [float(t64[12] @ t64[12 + k]) for k in range(25)], atol=1e-9)
    clock = chart_by_title(at, "binary clock")["data"]
    bits = z_of({"data": clock}, 0)
    assert bits.shape == (50, 6) and bits[37].tolist() == [1, 0, 1, 0, 0, 1]  # 37 = 100101b


@pytest.mark.slow  # 4 x 4 model variants (tests/app/variants.py): CI only
@pytest.mark.parametrize("pos", POSITIONS)
def test_every_pair_of_variant_settings_renders(pos):
    at = open_page("positions", PROMPT)
    use_random(at, pos_encoding=pos)
    for norm, placement, act in variants(pos):
        for name, value in (("norm", norm), ("norm_placement", placement), ("activation", act)):
            at.selectbox(key=f"sidebar.{name}").set_value(value)
        at.run()
        assert not at.exception, (pos, norm, placement, act, at.exception)
        assert not at.error, (pos, norm, placement, act, [e.value for e in at.error])
        assert len(at.table) == 1 and charts(at)


@pytest.mark.slow  # GPT-2 small's widths: CI only
def test_gpt2_shaped_model_renders():
    """GPT-2 small's widths (768, 12 heads, 1024 positions) with fewer layers and a smaller vocabulary."""
    at = open_page("positions", PROMPT)
    use_random(at, preset="gpt2", n_layer=2, vocab_size=4096)
    lm, _ = engine(at)
    assert lm.config.d_model == 768 and lm.config.context_length == 1024
    np.testing.assert_array_equal(
        z_of(chart_by_title(at, "Positional vectors")), lm.model.pos_emb.weight[:128].detach().numpy()
    )
