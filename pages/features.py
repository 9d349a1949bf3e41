"""Features (SAE): the sparse-autoencoder features that fire on each token of the prompt, and for
one feature its top held-out examples, what its decoder direction promotes, its histogram, and
a button to steer with it."""
import streamlit as st

from tfm.analysis import features as FT
from tfm.analysis import steering
from tfm.viz import features as ff
from tfm.viz import steer as fv
from tfm.viz.why import md
from ui import charts, sidebar, state
from ui.text import message

PER_TOKEN = 5


def token_features(lm, ids, spec):
    fs = FT.bundled(lm, spec)
    return FT.token_features(fs.sae, run.trace, PER_TOKEN, fs.skip)


sidebar.render()
st.title("Features (SAE)")
run = state.current_run()
tok, ss = run.lm.tokenizer, st.session_state
try:
    fs = state.derived("sae.features", FT.bundled, run.spec, run.device, run.spec)
except ValueError as e:
    st.info(message(e))
    st.stop()
cfg, m = fs.sae.cfg, fs.card["metrics"]
st.caption(f"A TopK sparse autoencoder rewrites the residual stream entering block {cfg.layer} as at most "
           f"{cfg.k} of {cfg.n_features} features per token. On held-out text: L0 {m['l0']:.1f}, "
           f"{100 * m['dead_share']:.1f}% dead features, variance unexplained {m['fvu']:.3f}, "
           f"CE loss recovered {100 * m['ce_recovered']:.1f}% (next-token loss {m['ce_clean']:.3f} clean, "
           f"{m['ce_recon']:.3f} with the reconstruction spliced in, {m['ce_zero']:.3f} with the stream zeroed).")

tf = state.derived("features.tokens", token_features, run.spec, run.device, run.ids, run.spec)
st.subheader("Features on each token")
if fs.skip:
    st.caption(f"The first {fs.skip} position(s) are left out: this model writes a huge-norm 'attention sink' "
               "there, which the SAE was not trained on.")
st.dataframe(ff.token_table(run.labels, tf.features, tf.acts), hide_index=True, height=min(400, 36 * len(run.ids) + 40),
             key="features.table")

state.url_init("features.feature", "feature", int)
if "features.feature" not in ss:
    ss["features.feature"] = FT.opening_feature(fs, run.trace)   # the strongest not-dense one on the last token
state.clamp_int("features.feature", 0, cfg.n_features - 1, 0, "Feature")  # a link's may be any number
feature = st.number_input(f"Feature to open (0..{cfg.n_features - 1})", 0, cfg.n_features - 1, key="features.feature")
state.url_set(feature=feature)
acts = fs.sae.encode(run.trace.residual_streams()[cfg.layer][1].float())[:, feature]
acts[:fs.skip] = 0                                              # positions the SAE was not trained on
acts = acts.tolist()
freq = float(fs.data["freq"][feature])
if freq == 0:
    st.warning(f"Feature {feature} never fired on the held-out text: it is a dead feature.")
elif freq > FT.DENSE_SHARE:
    st.caption(f"Feature {feature} fires on {freq:.1%} of held-out tokens, a dense feature: it says little about "
               "any one token. The page opens on the strongest feature of the last token that fires on at most "
               f"{FT.DENSE_SHARE:.0%} of them.")
charts.show(ff.along_prompt(run.labels, acts, feature), key="features.along")

st.subheader(f"Feature {feature}: top-activating held-out contexts")
contexts = fs.contexts(feature)
if contexts:
    shown = [([tok.decode([i]) for i in ids], a) for ids, a in contexts]
    st.markdown(ff.contexts_html(shown), unsafe_allow_html=True)
    st.caption("Orange: how strongly the feature fires on each token (hover for the number); from "
               f"{fs.card['eval_file'].rsplit('/', 1)[-1]}, never seen in training.")
else:
    st.info("No held-out context made it fire.")

c1, c2 = st.columns(2)
up, up_s, down, down_s = steering.read_out(run.lm, fs.sae.W_dec[feature], 8)
charts.show(fv.read_out_bars([tok.display_piece(i) for i in up], up_s, [tok.display_piece(i) for i in down], down_s,
                             f"Feature {feature}'s decoder direction:<br>tokens it promotes (+) and suppresses (−)"),
            key="features.readout", where=c1)
centres, counts = fs.histogram(feature)
charts.show(ff.histogram(centres, counts, feature, freq), key="features.hist", where=c2)

if st.button(f"Steer with feature {feature}", key="features.steer"):
    ss["steer.source"], ss["steer.feature"] = "SAE feature", int(feature)
    st.switch_page("pages/steer.py")
st.caption(md("The Steer page adds this feature's direction with a strength slider; "
              "\"Why this token?\" shows which features wrote a prediction."))
