"""The Attribution graph page's feature meanings: an opened feature's label and top-activating
held-out contexts (`tfm.analysis.dictionaries.transcoder_features`, shipped beside the transcoder set), and a
search over the graph's kept features by label (`ui.feature_search`'s box)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from tfm.analysis.dictionaries.transcoder_features import TranscoderFeatures
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import Graph
from tfm.viz import features as feature_figs
from ui import feature_search
from ui.graph_run import GraphRun
from ui.text import message, plain

NONE_SHIP = (
    "No labels or top-activating contexts ship with this transcoder set: what the feature's decoder "
    "row writes, read through the unembedding, stands in for a label. Make them with "
    "`python -m tfm.train.transcoder_labels --model MODEL --folder assets/transcoders/MODEL`."
)


def features(gr: GraphRun) -> TranscoderFeatures | None:
    """The set's labels and contexts, None (with a warning when they cannot be read) without them."""
    try:
        return gr.features()
    except ValueError as e:
        st.warning(f"This transcoder set's labels cannot be read: {message(e)}")
        return None


def check_note(check: bool | None) -> str:
    if check is None:
        return ""
    return (
        " (checked: added where it writes, as strongly as it ever fired, it raises that token's probability "
        "after each neutral prompt)"
        if check
        else " (its steering check failed: added as strongly as it ever fired, it does not raise that token's "
        "probability after every neutral prompt)"
    )


def meaning(tf: TranscoderFeatures | None, tok, layer: int, feature: int) -> None:
    """The opened feature's label and its top held-out contexts (the peak token shaded)."""
    if tf is None:
        st.caption(NONE_SHIP)
        return
    entry = tf.entry(layer, feature)
    st.markdown(
        f"**Label:** {plain(entry.label)}"
        + check_note(entry.check)
        + f" · fires on {100 * tf.freq(layer, feature):.2f}% of held-out tokens"
    )
    contexts = tf.contexts(layer, feature)
    if not contexts:
        st.info("No held-out context made it fire.")
        return
    shown = [
        ([tok.decode([i]) for i in c.ids], [c.activation if j == c.peak else 0.0 for j in range(len(c.ids))])
        for c in contexts
    ]
    st.markdown("**Top-activating held-out contexts**")
    st.markdown(feature_figs.contexts_html(shown), unsafe_allow_html=True)
    st.caption(
        "Orange: the token it fires hardest on in each context (hover for the activation); from "
        + ", ".join(f"{plain(c.domain or 'unknown', 20)} {c.activation:.2f}" for c in contexts)
        + " (held-out text of the mix the set's labels were made on, never trained on)."
    )


def search(g: Graph, tf: TranscoderFeatures | None, token_labels, options: list[int]) -> None:
    """A box finding the graph's kept features by label, top tokens or the token they say; a
    match opens as the node picker would."""
    if tf is None:
        return
    at = {(int(layer), int(f)): i for i in options for layer, _, f in [g.features[i].tolist()]}

    def found(query: str, limit: int) -> list[int]:
        return [at[p] for p in tf.search(query, limit, among=list(dict.fromkeys(at)))]

    def table(nodes: list[int]) -> pd.DataFrame:
        names = graph_view.node_names(g, nodes, token_labels)
        return pd.DataFrame(
            {"node": [names[i] for i in nodes], "id": nodes, "label": [tf.label(*_where(g, i)) for i in nodes]}
        )

    def named(i: int) -> str:
        return f"{graph_view.node_name(g, i, token_labels)}: {tf.label(*_where(g, i))}"[:120]

    feature_search.box(
        "graph",
        "Search the kept features by a word or a token (label, top tokens, the token it says)",
        found,
        table,
        named,
        "graph.node",
    )


def _where(g: Graph, i: int) -> tuple[int, int]:
    layer, _, f = g.features[i].tolist()
    return layer, f
