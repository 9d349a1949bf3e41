"""Features (SAE): the sparse-autoencoder features that fire on each token of the prompt, and for
one feature its top held-out examples, what its decoder direction promotes, its histogram, and
a button to steer with it."""

import streamlit as st

from tfm.viz import features as feature_figs
from tfm.viz import steer as steer_figs
from ui import charts, examples, feature_search as search, links, needs, sidebar
from ui.run import PromptRun, current_run
from ui.why_run import DENSE_SHARE
from ui.text import escape_markdown, message, plain
from ui.views.features import FeaturesView

PER_TOKEN = 5


def summary(feature_set) -> None:
    cfg, m = feature_set.sae.cfg, feature_set.card["metrics"]
    st.caption(
        f"A TopK sparse autoencoder rewrites the residual stream entering block {cfg.layer} as at most "
        f"{cfg.k} of {cfg.n_features} features per token. On held-out text: L0 {m['l0']:.1f}, "
        f"{100 * m['dead_share']:.1f}% dead features, variance unexplained {m['fvu']:.3f}, "
        f"CE loss recovered {100 * m['ce_recovered']:.1f}% (next-token loss {m['ce_clean']:.3f} clean, "
        f"{m['ce_recon']:.3f} with the reconstruction spliced in, {m['ce_zero']:.3f} with the stream zeroed)."
        + search.domain_note(feature_set.card)
    )


def token_table(run: PromptRun, feature_set) -> None:
    tf = run.sae_features(PER_TOKEN)
    st.subheader("Features on each token")
    if feature_set.skip:
        st.caption(
            f"The first {feature_set.skip} position(s) are left out: this model writes a huge-norm 'attention "
            "sink' there, which the SAE was not trained on."
        )
    names = feature_set.label if feature_set.labels is not None else None
    st.dataframe(
        feature_figs.token_table(run.labels, tf.features, tf.acts, names),
        hide_index=True,
        height=min(400, 36 * len(run.ids) + 40),
        key="features.table",
    )


def settings(run: PromptRun, n_features: int) -> FeaturesView:
    """The feature to open: the link's, else the strongest not-dense one on the last token (back into the link)."""
    ss = st.session_state
    links.url_init("features.feature", "feature", int, bounds=(0, n_features - 1))
    chosen, opening = ss.get("features.feature"), run.opening_feature()  # the strongest not-dense
    if not isinstance(chosen, int) or not 0 <= chosen < n_features:  # one on the last token
        ss["features.feature"] = opening
        if chosen is not None:  # another model's SAE had more features
            st.info(f"Feature {plain(chosen)} is not in this SAE (0 to {n_features - 1:,}): showing feature {opening}.")
    view = FeaturesView(
        st.number_input(f"Feature to open (0..{n_features - 1})", 0, n_features - 1, key="features.feature")
    )
    links.url_set(**view.link(), defaults=FeaturesView(opening).link())
    return view


def along(run: PromptRun, feature_set, feature: int) -> None:
    freq = float(feature_set.data["freq"][feature])
    if freq == 0:
        st.warning(f"Feature {feature} never fired on the held-out text: it is a dead feature.")
    elif freq > DENSE_SHARE:
        st.caption(
            f"Feature {feature} fires on {freq:.1%} of held-out tokens, a dense feature: it says little about "
            "any one token. The page opens on the strongest feature of the last token that fires on at most "
            f"{DENSE_SHARE:.0%} of them."
        )
    charts.show(
        feature_figs.along_prompt(run.labels, run.feature_acts(feature), feature, feature_set.label(feature)),
        key="features.along",
    )


def contexts(run: PromptRun, feature_set, feature: int) -> None:
    label, tok = feature_set.label(feature), run.lm.tokenizer
    st.subheader(f"Feature {feature}: top-activating held-out contexts")
    if label:
        st.markdown(f"**Label:** {plain(label)}" + search.check_note(feature_set, feature))
    found = feature_set.contexts(feature)
    if found:
        shown = [([tok.decode([i]) for i in ids], a) for ids, a in found]
        st.markdown(feature_figs.contexts_html(shown), unsafe_allow_html=True)
        st.caption(
            "Orange: how strongly the feature fires on each token (hover for the number); from "
            f"{plain(search.held_out(feature_set))}, never seen in training."
        )
    else:
        st.info("No held-out context made it fire.")


def direction(run: PromptRun, feature_set, feature: int) -> None:
    tok, freq = run.lm.tokenizer, float(feature_set.data["freq"][feature])
    c1, c2 = st.columns(2)
    r = run.read_out(feature_set.sae.W_dec[feature], 8)
    charts.show(
        steer_figs.read_out_figure(
            tok.display_piece, r, f"Feature {feature}'s decoder direction:<br>tokens it promotes (+) and suppresses (−)"
        ),
        key="features.readout",
        where=c1,
    )
    centres, counts = feature_set.histogram(feature)
    charts.show(feature_figs.histogram(centres, counts, feature, freq), key="features.hist", where=c2)
    if st.button(f"Steer with feature {feature}", key="features.steer"):
        st.session_state["steer.source"], st.session_state["steer.feature"] = "SAE feature", int(feature)
        st.switch_page("pages/steer.py")
    st.caption(
        escape_markdown(
            "The Steer page adds this feature's direction with a strength slider; "
            '"Why this token?" shows which features wrote a prediction.'
        )
    )


def main() -> None:
    sidebar.render()
    st.title("Features (SAE)")
    needs.next_token_head("Features (SAE)")
    run = current_run()
    examples.offer("features", run)
    try:
        feature_set = run.sae()
    except ValueError as e:
        st.info(message(e))
        st.stop()
    summary(feature_set)
    token_table(run, feature_set)
    search.render(feature_set)
    view = settings(run, feature_set.sae.cfg.n_features)
    along(run, feature_set, view.feature)
    contexts(run, feature_set, view.feature)
    direction(run, feature_set, view.feature)


main()
