"""The Attribution graph page's interventions: switch chosen features off or clamp them in one
forward pass of the real model (`GraphRun.intervention`; the shared model is never changed), and
show the change beside what the graph's edges predict."""

from __future__ import annotations

import streamlit as st

from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import Graph
from ui.graph_panels import picker_name
from ui.graph_run import GraphRun
from ui.text import message, plain


def intervention_panel(gr: GraphRun, g: Graph, labels, options: list[int], piece: str) -> None:
    st.subheader("Switch features off or clamp them, in the real model")
    ss, this = st.session_state, (g.ids, g.target, g.transcoders)
    if ss.get("graph.edit_of") != this:  # another graph: its node ids mean other features
        ss["graph.edit_of"] = this
        ss.pop("graph.edit_nodes", None)
    hidden = [i for i in ss.get("graph.edit_nodes", []) if i not in options]  # not drawn at this threshold
    c1, c2, c3 = st.columns([4, 2, 2])
    chosen = c1.multiselect(
        "Features", options + hidden, key="graph.edit_nodes", format_func=lambda i: picker_name(g, labels, i)
    )
    if hidden:
        c1.caption(f"{len(hidden)} chosen feature(s) are not drawn at this node threshold: they stay chosen.")
    mode = c2.radio("Set them", ["off", "to a value"], key="graph.edit_mode")
    # shown only for "to a value" (not disabled: a disabled widget keeps a value no one can change)
    value = None if mode == "off" else c3.number_input("Value", -1000.0, 1000.0, 0.0, key="graph.edit_value")
    if not chosen:
        st.caption(
            "Pick features above: each is set for one forward pass of the real model (the shared model "
            "is never changed), beside what the graph predicts (its edges, if features stayed linear)."
        )
        return
    try:
        out = gr.intervention(graph_view.feature_edits(g, chosen, value))
    except ValueError as e:
        st.error(message(e))
        return
    _outcome(out, piece)


def _outcome(out, piece: str) -> None:
    """The real change beside what the graph predicts (`graph_view.PREDICTIONS`)."""
    c = st.columns(6)
    c[0].metric(f"p({plain(piece, 30)}) before", f"{out.prob_before:.4f}")
    c[1].metric("after", f"{out.prob_after:.4f}", f"{out.prob_after - out.prob_before:+.4f}")
    c[2].metric("Target logit before", f"{out.logit_before:.3f}")
    c[3].metric("after", f"{out.logit_after:.3f}", f"{out.logit_after - out.logit_before:+.3f}")
    for col, (mode, value) in zip(
        c[4:],
        ((m, getattr(out, f)) for m, f in (("direct", "predicted_after"), ("first_order", "predicted_first_order"))),
    ):
        name, sums = graph_view.PREDICTIONS[mode]
        col.metric(
            f"Predicted by {name}",
            f"{value:.3f}",
            f"{value - out.logit_before:+.3f}",
            help=f"the logit before plus the chosen features' change times {sums}",
        )
    name, sums = graph_view.PREDICTIONS["total"]
    st.caption(
        f"Predicted by {name} ({sums}): {out.predicted_total:.3f} "
        f"({out.predicted_total - out.logit_before:+.3f}). The slopes rank the real effects of switching "
        "features off best (docs/benchmarks.md): the edges hold the final norm's scale, which an ablation "
        "moves."
    )
