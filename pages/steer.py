"""Steer: add a direction to the residual stream (from a pair of prompts or an SAE feature) and
watch the text change; the shared model is never changed (a per-call tfm.core.edits.Steer). The
page opens where a measurement on the running model says steering works
(`tfm.analysis.steering.calibrate.calibrate`, once per model), whatever the model is."""
import numpy as np
import streamlit as st

from tfm.analysis import attribution
from tfm.analysis.steering import vectors as steering
from tfm.analysis.steering import calibrate as calib
from tfm.core.escape import escape_markdown
from tfm.generation.generate import n_words, prepare_prompt
from tfm.viz import steer as steer_figs
from tfm.viz.attention import plotly_text
from ui import charts, links, needs, sidebar
from services import server
from ui.model_run import active_model
from ui.text import message
from ui.text import plain as shown

PAIR_CHARS = 1_000  # characters of each steering prompt

SOURCES = ("Prompt pair", "SAE feature")
MAX_STRENGTH, SWEEP_POINTS, MAX_NEW, MAX_WORDS = 1.5, 31, 64, 6
FALLBACK_STRENGTH = 0.4  # where no calibration can run (a context too short for its prompts)
DEFAULTS = {"steer.source": SOURCES[0], "steer.pos": calib.PAIR[0], "steer.neg": calib.PAIR[1],
            "steer.how": "mean", "steer.where": "all", "steer.new": 40, "steer.temperature": 0.8,
            "steer.words": "happy, kind, sad, angry", "steer.feature": 0, "steer.first": False}
WHERE = {"all": "prompt and generated tokens", "prompt": "prompt only", "generated": "generated tokens only"}


def mood_tokens(lm, text: str) -> list[int]:
    """The words to follow (comma separated), each as one token after a space; ValueError names one that is not."""
    words = [w.strip() for w in text.split(",") if w.strip()][:MAX_WORDS]
    if not words:
        raise ValueError("name at least one word to follow, e.g. happy, sad")
    return [attribution.token_id(lm.tokenizer, " " + w, min(lm.config.vocab_size, n_words(lm))) for w in words]


sidebar.render()
st.title("Steer")
needs.next_token_head("Steering")
st.caption("Add a direction to the residual stream entering one block, at every chosen position, during "
           "generation: activation steering. The model is untouched; the same seed gives the same draws.")
run = active_model()
if run is None:
    st.stop()
lm, cfg, tok, ss = run.lm, run.lm.config, run.lm.tokenizer, st.session_state
for k, v in DEFAULTS.items():
    ss.setdefault(k, v)
try:
    cal = run.steer_calibration()
except ValueError as e:
    cal = None
    st.warning(f"Cannot measure where steering works on this model ({message(e)}): opening at layer "
               f"{cfg.n_layer // 2}, strength {FALLBACK_STRENGTH}.")
if ss.get("steer.calibrated") != (run.spec, run.device):  # a new model: open where its own measurement says
    ss.update({"steer.layer": cal.layer if cal else cfg.n_layer // 2, "steer.calibrated": (run.spec, run.device),
               "steer.strength": cal.strength if cal else FALLBACK_STRENGTH})
    if ss.get("steer.prompt") in (None, "", *calib.OPEN_PROMPTS):
        ss["steer.prompt"] = cal.prompt if cal else calib.OPEN_PROMPTS[0]
ss["steer.strength"] = min(max(float(ss["steer.strength"]), -MAX_STRENGTH), MAX_STRENGTH)

links.cap_text("steer.prompt", "prompt to continue", server.limits().max_prompt_chars)
prompt = st.text_input("Prompt to continue (this page's own; the sidebar's is not used here)", key="steer.prompt")
source = st.radio("Direction from", SOURCES, horizontal=True, key="steer.source")
try:
    if source == SOURCES[0]:
        c1, c2, c3, c4 = st.columns([3, 3, 1.6, 1.4])
        links.cap_text("steer.pos", "positive prompt", PAIR_CHARS)  # a paste is cut with a word, not dropped
        links.cap_text("steer.neg", "negative prompt", PAIR_CHARS)
        pos = c1.text_input("Toward (positive prompt)", key="steer.pos")
        neg = c2.text_input("Away from (negative prompt)", key="steer.neg")
        how = c3.radio("Stream at", ["mean", "last"], key="steer.how", horizontal=True,
                       help="mean: averaged over each prompt's tokens; last: at its last token. Either is read "
                            "after the model's start token or a newline, never at position 0 (the attention sink).")
        layer = c4.number_input("Layer", 0, cfg.n_layer - 1, key="steer.layer")
        direction = run.pair_direction(pos, neg, int(layer), how)
    else:
        try:
            feature_set = run.sae()
        except ValueError as e:  # no SAE ships for this model: an info, as on the Features page
            st.info(f"{message(e)}. A prompt pair steers every model.")
            st.stop()
        n_features = feature_set.sae.cfg.n_features
        ss["steer.feature"] = min(max(int(ss["steer.feature"]), 0), n_features - 1)
        feature = st.number_input(f"Feature (0..{n_features - 1}; the SAE reads layer {feature_set.layer})", 0,
                                  n_features - 1, key="steer.feature")
        direction = run.feature_direction(int(feature))
        st.caption(f"{shown(feature_set.named(int(feature)), 120)}. Strength 1 adds the feature's decoder direction "
                   "as strongly as it ever fired on held-out text.")
    vec = direction.vector
except ValueError as e:
    st.error(message(e))
    st.stop()

c1, c2, c3, c4 = st.columns([4, 2.4, 1.2, 1.6])
strength = c1.slider("Strength (× the layer's typical stream length)", -MAX_STRENGTH, MAX_STRENGTH, step=calib.STEP,
                     key="steer.strength")
where = c2.radio("Steer at", list(WHERE), format_func=WHERE.get, key="steer.where")
ids = prepare_prompt(lm, prompt, room=1).ids
cap = max(1, min(MAX_NEW, server.limits().max_new_tokens, cfg.context_length - len(ids)))
ss["steer.new"] = min(max(int(ss["steer.new"]), 1), cap)
new = c3.number_input("New tokens", 1, cap, key="steer.new")
temperature = c4.slider("Temperature", 0.0, 1.5, step=0.1, key="steer.temperature")
first = st.checkbox("Steer position 0 and special tokens too", key="steer.first",
                    help="Left alone by default: position 0 is where attention parks (the sink); adding there "
                         "changes every later token, and on many models the text comes apart.")
seed = int(ss["sidebar.seed"])
typical = run.stream_norms()[vec.layer]
st.caption(f"Direction: {shown(vec.source, 200)}; read, it was {vec.raw_length:.3f} long, "
           f"{vec.raw_length / typical:.2f}× the stream's typical length entering layer {vec.layer} ({typical:.3f}: "
           f"the median over a neutral text's tokens, position 0 left out). Steering adds {strength:+.2f} × "
           f"{float(vec.vector.norm()):.3f}.")
if cal is not None:
    with st.expander(f"Why layer {cal.layer}, strength {cal.strength:g} and this prompt: measured on this model"):
        if not cal.moves:
            st.warning("No layer tried moved both moods while keeping the text fluent: these are the best found.")
        st.markdown(f"Each layer tried got the strength at which steering costs {calib.MAX_DAMAGE} nats per token "
                    "of ordinary text; three short texts toward and away on each prompt then counted the mood words.")
        st.dataframe([{"prompt": t.prompt, "layer": t.layer, "strength": t.strength, "damage": round(t.damage, 3),
                       "pull +": round(t.pull_toward, 2), "pull −": round(t.pull_away, 2), "words +": t.toward,
                       "words −": t.away, "plain (+, −)": str(t.plain), "fluent": t.fluent} for t in cal.trials])

try:
    plain, steered = run.steered_texts(direction, prompt, float(strength), seed, int(new), float(temperature), where,
                                       bool(first))
except ValueError as e:
    st.error(f"Cannot generate: {message(e)}")
    st.stop()
left, right = st.columns(2)
for col, title, text in ((left, "Without steering", plain), (right, f"Steered (strength {strength:+.2f})", steered)):
    col.subheader(title)
    col.markdown(escape_markdown(text).replace("\n", "  \n") or "*(nothing)*")

up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
charts.show(steer_figs.read_out_bars(
    [tok.display_piece(i) for i in up], up_s, [tok.display_piece(i) for i in down], down_s,
    "The direction read through the unembedding: tokens it promotes (+) and suppresses (−)"), key="steer.readout")

links.cap_text("steer.words", "words to follow", 200)
words_text = st.text_input(f"Words to follow as the strength sweeps (up to {MAX_WORDS}, comma separated)",
                           key="steer.words")
try:
    tokens = mood_tokens(lm, words_text)
except ValueError as e:
    st.warning(message(e))
    st.stop()
strengths = np.linspace(-MAX_STRENGTH, MAX_STRENGTH, SWEEP_POINTS).round(6).tolist()
probs = run.mood_sweep(direction, ids, tuple(tokens), tuple(strengths), bool(first))
charts.show(steer_figs.mood_sweep(strengths, probs, [tok.display_piece(t) for t in tokens], float(strength),
                                  f"p(word) after {plotly_text(repr(prompt[:60]))}, steering the prompt "
                                  f"(one batched run of {SWEEP_POINTS} strengths)"), key="steer.sweep")
