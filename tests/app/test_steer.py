"""Steer page: it opens where the engine's calibration of the running model says (its layer,
strength and prompt, never the model's name); the texts, the read-out and the mood-word sweep equal
the engine's (same seed, same vector); feature steering uses the shipped SAE; bad input gives one
message, no traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfm.analysis.dictionaries import features as FT
from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import vectors as steering
from tfm.generation.generate import prepare_prompt
from tfm.core.escape import escape_markdown
from ui import models
from ui.model_run import ModelRun
from ui.steer_run import MoodSweep

from tests.app.conftest import as_shown, chart_by_title, decode, open_page, use_random

PAGE = Path(__file__).resolve().parents[2] / "pages" / "steer.py"


def _ok(at):
    at.run()
    assert not at.exception, at.exception
    return at


def _shown(text: str) -> str:
    """A text as the page shows it, whitespace runs as one space (Streamlit trims blank lines)."""
    return " ".join(escape_markdown(text).split())


def _lm():
    return models.load_lm(models.default_model_spec(), "cpu")


def test_the_page_opens_where_the_calibration_of_this_model_says():
    at = open_page("steer")
    assert not at.error
    cal = calib.calibrate(_lm())
    ss = at.session_state
    assert (ss["steer.layer"], ss["steer.strength"], ss["steer.prompt"]) == (cal.layer, cal.strength, cal.prompt)
    assert (ss["steer.pos"], ss["steer.neg"]) == calib.PAIR
    table = at.dataframe[0].value
    assert table["layer"].tolist() == [t.layer for t in cal.trials]
    assert table["strength"].tolist() == [t.strength for t in cal.trials]
    assert table["words +"].tolist() == [t.toward for t in cal.trials]
    source = PAGE.read_text()
    assert "smollm2" not in source.lower() and "run.spec ==" not in source  # nothing decided by a name


def test_texts_readout_and_mood_sweep_equal_the_engine():
    at = open_page("steer")
    at.slider(key="steer.strength").set_value(0.8)
    at.number_input(key="steer.new").set_value(12)
    _ok(at)
    assert not at.error
    lm, ss = _lm(), at.session_state
    prompt, layer = ss["steer.prompt"], int(ss["steer.layer"])
    vec = steering.pair_vector(lm, *calib.PAIR, layer, "mean")
    seed = int(ss["sidebar.seed"])
    plain, steered = steering.steered_pair(lm, prompt, vec, 0.8, seed, 12, 0.8)
    shown = [" ".join(m.value.split()) for m in at.markdown]
    assert _shown(plain) in shown and _shown(steered) in shown and plain != steered
    up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
    bars = chart_by_title(at, "read through the unembedding")["data"][0]
    np.testing.assert_allclose(decode(bars["x"]), down_s[::-1] + up_s[::-1], rtol=1e-5)
    tokens = [lm.tokenizer.encode(" " + w)[0] for w in ("happy", "kind", "sad", "angry")]
    strengths = np.linspace(-1.5, 1.5, 31).round(6).tolist()
    ids = prepare_prompt(lm, prompt).ids
    want = steering.sweep_tokens(lm, ids, vec, strengths, tokens).numpy()
    lines = chart_by_title(at, "one batched run")["data"]
    assert len(lines) == 4
    for k, line in enumerate(lines):
        np.testing.assert_allclose(decode(line["y"]), want[:, k], rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(decode(line["x"]), strengths)


def test_position_zero_is_steered_only_when_asked():
    at = open_page("steer")
    at.number_input(key="steer.new").set_value(10)
    at.checkbox(key="steer.first").check()
    _ok(at)
    lm, ss = _lm(), at.session_state
    vec = steering.pair_vector(lm, *calib.PAIR, int(ss["steer.layer"]))
    strength, seed = float(ss["steer.strength"]), int(ss["sidebar.seed"])
    _, first = steering.steered_pair(lm, ss["steer.prompt"], vec, strength, seed, 10, 0.8, include_first=True)
    assert _shown(first) in [" ".join(m.value.split()) for m in at.markdown]
    ids, happy = prepare_prompt(lm, ss["steer.prompt"]).ids, lm.tokenizer.encode(" happy")[0]
    strengths = np.linspace(-1.5, 1.5, 31).round(6).tolist()
    with_first = steering.sweep_tokens(lm, ids, vec, strengths, [happy], include_first=True)[:, 0].numpy()
    line = chart_by_title(at, "one batched run")["data"][0]
    np.testing.assert_allclose(decode(line["y"]), with_first, rtol=1e-5, atol=1e-9)
    assert not np.allclose(with_first, steering.sweep_tokens(lm, ids, vec, strengths, [happy])[:, 0].numpy())


def test_strength_zero_gives_the_same_text_twice():
    at = open_page("steer")
    at.slider(key="steer.strength").set_value(0.0)
    at.number_input(key="steer.new").set_value(10)
    _ok(at)
    texts = [m.value for m in at.markdown if m.value and not m.value.startswith("<")]
    texts = [t for t in texts if not t.startswith("Each layer tried")][:2]
    assert len(texts) == 2 and texts[0] == texts[1]


def test_feature_source_uses_the_shipped_sae():
    at = open_page("steer")
    at.radio(key="steer.source").set_value("SAE feature")
    _ok(at)
    at.number_input(key="steer.feature").set_value(5)
    _ok(at)
    assert not at.error
    lm = _lm()
    fs = FT.bundled(lm, "default")
    vec = steering.feature_vector(fs.sae, 5, float(fs.data["hist_max"][5]) or 1.0)
    up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
    bars = chart_by_title(at, "read through the unembedding")["data"][0]
    np.testing.assert_allclose(decode(bars["x"]), down_s[::-1] + up_s[::-1], rtol=1e-5)
    assert any(as_shown(c.value).startswith(f"feature 5: {fs.labels.features[5].label}. ") for c in at.caption)


def test_bad_input_one_message():
    at = open_page("steer")
    at.text_input(key="steer.neg").set_value("")
    _ok(at)
    assert len(at.error) == 1 and "negative prompt is empty" in at.error[0].value
    at.text_input(key="steer.neg").set_value(" sad")
    _ok(at)
    at.text_input(key="steer.words").set_value("happy, happyhappyjoy")
    _ok(at)
    assert len(at.warning) == 1 and "not one token" in at.warning[0].value
    at.text_input(key="steer.words").set_value(" , ")
    _ok(at)
    assert len(at.warning) == 1 and "at least one word" in at.warning[0].value
    use_random(at)
    at.radio(key="steer.source").set_value("SAE feature")
    _ok(at)
    assert any("Cannot measure where steering works" in w.value for w in at.warning)  # a 32-token context
    assert not at.error and any("no sparse autoencoder ships for this model" in i.value for i in at.info)


def test_a_pair_with_no_direction_where_it_is_read_is_a_warning_saying_why():
    """Valid settings with no direction (the last token's stream entering block 0, both prompts
    ending in "."): a warning that says what to change, not an error; a later layer steers."""
    at = open_page("steer")
    at.text_input(key="steer.pos").set_value("The cat sat.")
    at.text_input(key="steer.neg").set_value("The dog sat.")
    at.radio(key="steer.how").set_value("last")
    at.number_input(key="steer.layer").set_value(0)
    _ok(at)
    assert not at.error and len(at.warning) == 1, ([e.value for e in at.error], [w.value for w in at.warning])
    assert "entering block 0 a position holds only its own token" in at.warning[0].value
    at.number_input(key="steer.layer").set_value(1)
    _ok(at)
    assert not at.error and not at.warning and any("Steered" in h.value for h in at.subheader)


def test_mood_sweep_is_a_typed_result_equal_to_the_engine():
    """ui.steer_run.MoodSweep: the strengths and tokens asked, one row per token of
    `steering.sweep_tokens`' probabilities (its columns), and a shape check."""
    lm, spec = _lm(), models.default_model_spec()
    run = ModelRun(lm, spec, "cpu")
    direction = run.pair_direction(*calib.PAIR, 1, "mean")
    ids = tuple(prepare_prompt(lm, "I feel so").ids)
    tokens = tuple(lm.tokenizer.encode(" " + w)[0] for w in ("happy", "sad", "angry"))
    strengths = (-1.0, 0.0, 0.5, 1.5)
    found = run.mood_sweep(direction, ids, tokens, strengths)
    assert (found.strengths, found.tokens) == (strengths, tokens)
    want = steering.sweep_tokens(lm, ids, steering.pair_vector(lm, *calib.PAIR, 1, "mean"), strengths, tokens)
    assert len(found.probs) == 3 and all(isinstance(row, tuple) for row in found.probs)
    np.testing.assert_allclose(np.array(found.probs), want.numpy().T, rtol=1e-6)
    with pytest.raises(ValueError, match="one row of 4 probabilities per token"):
        MoodSweep(strengths, tokens, found.probs[:2])
    with pytest.raises(ValueError, match="one row of 4 probabilities per token"):
        MoodSweep(strengths, tokens[:2], tuple(row[:3] for row in found.probs[:2]))
