"""Features (SAE): the sparse-autoencoder features that fire on each token of the prompt, and for
one feature its top held-out examples, what its decoder direction promotes, its histogram, and
a button to steer with it."""
import streamlit as st

from tfm.analysis.steering import vectors as steering
from tfm.analysis.dictionaries.features import DENSE_SHARE, opening_feature
from tfm.core.escape import escape_markdown
from tfm.viz import features as feature_figs
from tfm.viz import steer as steer_figs
from ui import charts, examples, feature_search as search, links, needs, sidebar
from ui.run import current_run
from ui.text import message, plain

PER_TOKEN = 5

sidebar.render()
st.title("Features (SAE)")
needs.next_token_head("Features (SAE)")
run = current_run()
examples.offer("features", run)
tok, ss = run.lm.tokenizer, st.session_state
try:
    feature_set = run.sae()
except ValueError as e:
    st.info(message(e))
    st.stop()
cfg, m = feature_set.sae.cfg, feature_set.card["metrics"]
st.caption(f"A TopK sparse autoencoder rewrites the residual stream entering block {cfg.layer} as at most "
           f"{cfg.k} of {cfg.n_features} features per token. On held-out text: L0 {m['l0']:.1f}, "
           f"{100 * m['dead_share']:.1f}% dead features, variance unexplained {m['fvu']:.3f}, "
           f"CE loss recovered {100 * m['ce_recovered']:.1f}% (next-token loss {m['ce_clean']:.3f} clean, "
           f"{m['ce_recon']:.3f} with the reconstruction spliced in, {m['ce_zero']:.3f} with the stream zeroed)."
           + search.domain_note(feature_set.card))

tf = run.sae_features(PER_TOKEN)
st.subheader("Features on each token")
if feature_set.skip:
    st.caption(f"The first {feature_set.skip} position(s) are left out: this model writes a huge-norm 'attention "
               "sink' there, which the SAE was not trained on.")
names = feature_set.label if feature_set.labels is not None else None
st.dataframe(feature_figs.token_table(run.labels, tf.features, tf.acts, names), hide_index=True,
             height=min(400, 36 * len(run.ids) + 40), key="features.table")

search.render(feature_set)
links.url_init("features.feature", "feature", int, bounds=(0, cfg.n_features - 1))
chosen, opening = ss.get("features.feature"), opening_feature(feature_set, run.trace)  # the strongest not-dense
if not isinstance(chosen, int) or not 0 <= chosen < cfg.n_features:                      # one on the last token
    ss["features.feature"] = opening
    if chosen is not None:                                        # another model's SAE had more features
        st.info(f"Feature {plain(chosen)} is not in this SAE (0 to {cfg.n_features - 1:,}): showing feature {opening}.")
feature = st.number_input(f"Feature to open (0..{cfg.n_features - 1})", 0, cfg.n_features - 1, key="features.feature")
links.url_set(feature=feature, defaults=dict(feature=opening))
acts = feature_set.sae.encode(run.trace.residual_streams()[cfg.layer][1].float())[:, feature]
acts[:feature_set.skip] = 0                                     # positions the SAE was not trained on
acts = acts.tolist()
freq = float(feature_set.data["freq"][feature])
if freq == 0:
    st.warning(f"Feature {feature} never fired on the held-out text: it is a dead feature.")
elif freq > DENSE_SHARE:
    st.caption(f"Feature {feature} fires on {freq:.1%} of held-out tokens, a dense feature: it says little about "
               "any one token. The page opens on the strongest feature of the last token that fires on at most "
               f"{DENSE_SHARE:.0%} of them.")
label = feature_set.label(feature)
charts.show(feature_figs.along_prompt(run.labels, acts, feature, label), key="features.along")

st.subheader(f"Feature {feature}: top-activating held-out contexts")
if label:
    st.markdown(f"**Label:** {plain(label)}" + search.check_note(feature_set, feature))
contexts = feature_set.contexts(feature)
if contexts:
    shown = [([tok.decode([i]) for i in ids], a) for ids, a in contexts]
    st.markdown(feature_figs.contexts_html(shown), unsafe_allow_html=True)
    st.caption("Orange: how strongly the feature fires on each token (hover for the number); from "
               f"{plain(search.held_out(feature_set))}, never seen in training.")
else:
    st.info("No held-out context made it fire.")

c1, c2 = st.columns(2)
up, up_s, down, down_s = steering.read_out(run.lm, feature_set.sae.W_dec[feature], 8)
charts.show(steer_figs.read_out_bars([tok.display_piece(i) for i in up], up_s, [tok.display_piece(i) for i in down], down_s,
                             f"Feature {feature}'s decoder direction:<br>tokens it promotes (+) and suppresses (−)"),
            key="features.readout", where=c1)
centres, counts = feature_set.histogram(feature)
charts.show(feature_figs.histogram(centres, counts, feature, freq), key="features.hist", where=c2)

if st.button(f"Steer with feature {feature}", key="features.steer"):
    ss["steer.source"], ss["steer.feature"] = "SAE feature", int(feature)
    st.switch_page("pages/steer.py")
st.caption(escape_markdown("The Steer page adds this feature's direction with a strength slider; "
              "\"Why this token?\" shows which features wrote a prediction."))
