"""Steer: add a direction to the residual stream (from a pair of prompts or an SAE feature) and
watch the text change; the shared model is never changed (a per-call tfm.core.edits.Steer)."""
import numpy as np
import streamlit as st

from tfm.analysis import attribution, steering
from tfm.core.plain import escape_markdown
from tfm.generation.generate import n_words
from tfm.viz import steer as steer_figs
from tfm.viz.attention import plotly_text
from ui import charts, links, models, server, sidebar
from ui.run import current_run
from ui.text import message
from ui.text import plain as shown

PAIR_CHARS = 1_000  # characters of each steering prompt

SOURCES = ("Prompt pair", "SAE feature")
MAX_STRENGTH, SWEEP_POINTS, MAX_NEW = 20.0, 21, 64
DEFAULTS = {"steer.source": SOURCES[0], "steer.pos": " happy and kind", "steer.neg": " sad and angry",
            "steer.how": "mean", "steer.strength": 1.5, "steer.where": "all", "steer.new": 40,
            "steer.temperature": 0.8, "steer.token": " happy", "steer.feature": 0}
WHERE = {"all": "prompt and generated tokens", "prompt": "prompt only", "generated": "generated tokens only"}

sidebar.render()
st.title("Steer")
st.caption("Add a direction to the residual stream entering one block, at every chosen position, during "
           "generation: activation steering. The model is untouched; the same seed gives the same draws.")
run = current_run()
lm, cfg, tok, ss = run.lm, run.lm.config, run.lm.tokenizer, st.session_state
for k, v in (DEFAULTS | {"steer.strength": models.steer_strength(run.spec, DEFAULTS["steer.strength"])}).items():
    ss.setdefault(k, v)
if not isinstance(ss.get("steer.layer"), int) or not 0 <= ss["steer.layer"] < cfg.n_layer:
    ss["steer.layer"] = cfg.n_layer // 2

source = st.radio("Direction from", SOURCES, horizontal=True, key="steer.source")
try:
    if source == SOURCES[0]:
        c1, c2, c3, c4 = st.columns([3, 3, 1.6, 1.4])
        links.cap_text("steer.pos", "positive prompt", PAIR_CHARS)  # a paste is cut with a word, not dropped
        links.cap_text("steer.neg", "negative prompt", PAIR_CHARS)
        pos = c1.text_input("Toward (positive prompt)", key="steer.pos")
        neg = c2.text_input("Away from (negative prompt)", key="steer.neg")
        how = c3.radio("Stream at", ["mean", "last"], key="steer.how", horizontal=True,
                       help="mean: averaged over each prompt's positions; last: at its last token.")
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
        st.caption("Strength 1 adds the feature's decoder direction as strongly as it ever fired on held-out text.")
    vec = direction.vector
except ValueError as e:
    st.error(message(e))
    st.stop()

c1, c2, c3, c4 = st.columns([4, 2.4, 1.2, 1.6])
strength = c1.slider("Strength", -MAX_STRENGTH, MAX_STRENGTH, step=0.5, key="steer.strength")
where = c2.radio("Steer at", list(WHERE), format_func=WHERE.get, key="steer.where")
cap = max(1, min(MAX_NEW, server.limits().max_new_tokens, cfg.context_length - len(run.ids)))
ss["steer.new"] = min(max(int(ss["steer.new"]), 1), cap)
new = c3.number_input("New tokens", 1, cap, key="steer.new")
temperature = c4.slider("Temperature", 0.0, 1.5, step=0.1, key="steer.temperature")
seed = int(ss["sidebar.seed"])
stream_length = float(run.trace.residual_streams()[vec.layer][1].norm(dim=-1).median())
st.caption(f"Direction: {shown(vec.source, 200)}, length {float(vec.vector.norm()):.3f} "
           f"(the stream's own length here is about {stream_length:.3f}, the median over positions: a real "
           "model's first position, its attention sink, is far longer).")

try:
    plain, steered = run.steered_texts(direction, ss["sidebar.prompt"][:server.limits().max_prompt_chars],
                                       float(strength), seed, int(new), float(temperature), where)
except ValueError as e:
    st.error(f"Cannot generate: {message(e)}")
    st.stop()
left, right = st.columns(2)
for col, title, text in ((left, "Without steering", plain), (right, f"Steered (strength {strength:+.1f})", steered)):
    col.subheader(title)
    col.markdown(escape_markdown(text).replace("\n", "  \n") or "*(nothing)*")

up, up_s, down, down_s = steering.read_out(lm, vec.vector, 10)
charts.show(steer_figs.read_out_bars([tok.display_piece(i) for i in up], up_s, [tok.display_piece(i) for i in down], down_s,
                             "The direction read through the unembedding: tokens it promotes (+) and suppresses (−)"),
            key="steer.readout")

links.cap_text("steer.token", "token to follow", 100)
token_text = st.text_input("Token to follow as the strength sweeps", key="steer.token")
try:
    token = attribution.token_id(tok, token_text, min(cfg.vocab_size, n_words(lm)))
except ValueError as e:
    st.warning(message(e))
    st.stop()
strengths = np.linspace(-MAX_STRENGTH, MAX_STRENGTH, SWEEP_POINTS).tolist()
probs = run.steering_sweep(direction, token, tuple(strengths))
charts.show(steer_figs.sweep_line(strengths, probs, tok.display_piece(token), float(strength),
                          f"p({plotly_text(repr(tok.display_piece(token)))}) after the prompt, steering every position "
                          f"(one batched run of {SWEEP_POINTS} strengths)"), key="steer.sweep")
