"""The Steer page's controls: where it opens (`tfm.analysis.steering.calibrate`, measured on the
running model), the page's view (`ui.views.steer.SteerView`) from its widgets, and the direction
it names. The page draws from these and `ui.model_run.ModelRun`'s steering methods."""

from __future__ import annotations

import streamlit as st

from tfm.analysis import attribution
from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import vectors as steering
from tfm.generation.generate import n_words, prepare_prompt
from services import server
from ui import links
from ui.model_run import ModelRun
from ui.steer_run import Direction, ReadOut
from ui.text import message
from ui.text import plain as shown
from ui.views.steer import SteerView

PAIR_CHARS = 1_000  # characters of each steering prompt
SOURCES = ("Prompt pair", "SAE feature")
MAX_STRENGTH, SWEEP_POINTS, MAX_NEW, MAX_WORDS = 1.5, 31, 64, 6
FALLBACK_STRENGTH = 0.4  # where no calibration can run (a context too short for its prompts)
DEFAULTS = {
    "steer.source": SOURCES[0],
    "steer.pos": calib.PAIR[0],
    "steer.neg": calib.PAIR[1],
    "steer.how": "mean",
    "steer.where": "all",
    "steer.new": 40,
    "steer.temperature": 0.8,
    "steer.words": "happy, kind, sad, angry",
    "steer.feature": 0,
    "steer.first": False,
}
WHERE = {"all": "prompt and generated tokens", "prompt": "prompt only", "generated": "generated tokens only"}
MAX_DAMAGE = calib.MAX_DAMAGE


def calibration(run: ModelRun, warn: bool = False) -> calib.Calibration | None:
    """Where steering works on this model; None (saying so when `warn`) where it cannot be measured."""
    try:
        return run.steer_calibration()
    except ValueError as e:
        if warn:
            st.warning(
                f"Cannot measure where steering works on this model ({message(e)}): opening at layer "
                f"{run.lm.config.n_layer // 2}, strength {FALLBACK_STRENGTH}."
            )
        return None


def _open(run: ModelRun) -> None:
    """Defaults; on a new model, the layer, strength and prompt its own measurement chose."""
    ss, n_layer = st.session_state, run.lm.config.n_layer
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    cal = calibration(run, warn=True)
    if ss.get("steer.calibrated") != (run.spec, run.device):  # a new model: open where its own measurement says
        ss.update(
            {
                "steer.layer": cal.layer if cal else n_layer // 2,
                "steer.calibrated": (run.spec, run.device),
                "steer.strength": cal.strength if cal else FALLBACK_STRENGTH,
            }
        )
        if ss.get("steer.prompt") in (None, "", *calib.OPEN_PROMPTS):
            ss["steer.prompt"] = cal.prompt if cal else calib.OPEN_PROMPTS[0]
    links.put("steer.strength", min(max(float(ss["steer.strength"]), -MAX_STRENGTH), MAX_STRENGTH))


def _pair(run: ModelRun) -> tuple[str, str, str, int]:
    c1, c2, c3, c4 = st.columns([3, 3, 1.6, 1.4])
    links.cap_text("steer.pos", "positive prompt", PAIR_CHARS)  # a paste is cut with a word, not dropped
    links.cap_text("steer.neg", "negative prompt", PAIR_CHARS)
    pos = c1.text_input("Toward (positive prompt)", key="steer.pos")
    neg = c2.text_input("Away from (negative prompt)", key="steer.neg")
    how = c3.radio(
        "Stream at",
        ["mean", "last"],
        key="steer.how",
        horizontal=True,
        help="mean: averaged over each prompt's tokens; last: at its last token. Either is read "
        "after the model's start token or a newline, never at position 0 (the attention sink).",
    )
    layer = c4.number_input("Layer", 0, run.lm.config.n_layer - 1, key="steer.layer")
    return pos, neg, how, int(layer)


def _feature(run: ModelRun) -> int:
    try:
        feature_set = run.sae()
    except ValueError as e:  # no SAE ships for this model: an info, as on the Features page
        st.info(f"{message(e)}. A prompt pair steers every model.")
        st.stop()
    n_features = feature_set.sae.cfg.n_features
    st.session_state["steer.feature"] = min(max(int(st.session_state["steer.feature"]), 0), n_features - 1)
    feature = int(
        st.number_input(
            f"Feature (0..{n_features - 1}; the SAE reads layer {feature_set.layer})",
            0,
            n_features - 1,
            key="steer.feature",
        )
    )
    st.caption(
        f"{shown(feature_set.named(feature), 120)}. Strength 1 adds the feature's decoder direction "
        "as strongly as it ever fired on held-out text."
    )
    return feature


def _how(run: ModelRun, prompt: str) -> tuple[float, str, int, float, bool]:
    """Strength, where, new tokens, temperature and whether position 0 is steered too."""
    ss, cfg = st.session_state, run.lm.config
    c1, c2, c3, c4 = st.columns([4, 2.4, 1.2, 1.6])
    strength = c1.slider(
        "Strength (× the layer's typical stream length)",
        -MAX_STRENGTH,
        MAX_STRENGTH,
        step=calib.STEP,
        key="steer.strength",
    )
    where = c2.radio("Steer at", list(WHERE), format_func=WHERE.get, key="steer.where")
    cap = max(1, min(MAX_NEW, server.limits().max_new_tokens, cfg.context_length - len(prompt_ids(run, prompt))))
    links.put("steer.new", min(max(int(ss["steer.new"]), 1), cap))
    new = c3.number_input("New tokens", 1, cap, key="steer.new")
    temperature = c4.slider("Temperature", 0.0, 1.5, step=0.1, key="steer.temperature")
    first = st.checkbox(
        "Steer position 0 and special tokens too",
        key="steer.first",
        help="Left alone by default: position 0 is where attention parks (the sink); adding there "
        "changes every later token, and on many models the text comes apart.",
    )
    return float(strength), where, int(new), float(temperature), bool(first)


def controls(run: ModelRun, words_slot) -> SteerView:
    """The page's view from its widgets (the words to follow drawn in `words_slot`, below the texts);
    a direction that cannot be made shows why and stops the page."""
    ss = st.session_state
    _open(run)
    links.cap_text("steer.prompt", "prompt to continue", server.limits().max_prompt_chars)
    prompt = st.text_input("Prompt to continue (this page's own; the sidebar's is not used here)", key="steer.prompt")
    source = st.radio("Direction from", SOURCES, horizontal=True, key="steer.source")
    pos, neg, how, layer = (
        _pair(run)
        if source == SOURCES[0]
        else (ss["steer.pos"], ss["steer.neg"], ss["steer.how"], int(ss["steer.layer"]))
    )
    feature = _feature(run) if source == SOURCES[1] else int(ss["steer.feature"])
    recipe = SteerView(prompt, source, pos, neg, how, layer, feature, 0.0, "all", 1, 0.0, False, "")
    direction(run, recipe)  # refused here, before the widgets below, when it cannot be made
    strength, where, new, temperature, first = _how(run, prompt)
    links.cap_text("steer.words", "words to follow", 200)
    words = words_slot.text_input(
        f"Words to follow as the strength sweeps (up to {MAX_WORDS}, comma separated)", key="steer.words"
    )
    return SteerView(prompt, source, pos, neg, how, layer, feature, strength, where, new, temperature, first, words)


def direction(run: ModelRun, view: SteerView) -> Direction:
    """The view's direction (cached per model); one that cannot be made shows why and stops the page."""
    try:
        if view.source == SOURCES[0]:
            return run.pair_direction(view.pos, view.neg, view.layer, view.how)
        return run.feature_direction(view.feature)
    except steering.SameStream as e:  # valid settings that give no direction: a warning that says why
        st.warning(message(e))
        st.stop()
    except ValueError as e:
        st.error(message(e))
        st.stop()


def prompt_ids(run: ModelRun, prompt: str) -> tuple[int, ...]:
    """The page's prompt as ids, cut to leave one token of room (`prepare_prompt`)."""
    return prepare_prompt(run.lm, prompt, room=1).ids


def mood_tokens(run: ModelRun, text: str) -> list[int]:
    """The words to follow (comma separated), each as one token after a space; ValueError names one that is not."""
    lm = run.lm
    words = [w.strip() for w in text.split(",") if w.strip()][:MAX_WORDS]
    if not words:
        raise ValueError("name at least one word to follow, e.g. happy, sad")
    return [attribution.token_id(lm.tokenizer, " " + w, min(lm.config.vocab_size, n_words(lm))) for w in words]


def read_out(run: ModelRun, direction_: Direction, n: int = 10) -> ReadOut:
    """The tokens a direction promotes and suppresses most (`ModelRun.read_out`)."""
    return run.read_out(direction_.vector.vector, n)
