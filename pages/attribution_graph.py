"""Attribution graph: which transcoder features made the model predict a token, and through what
(layers up, positions across); open a feature, group features into supernodes, switch features off
in the real model, download the graph."""

import streamlit as st

from ui import graph_features, graph_intervention, graph_panels, graph_run, needs, sidebar
from ui.graph_run import GraphSettings
from ui.run import PromptRun, current_run
from ui.text import message
from ui.views.attribution_graph import GraphView

SETTINGS = GraphSettings(max_tokens=64)  # graphs are for short prompts: each feature row is a backward pass
INTRO = (
    "Each MLP is replaced by a transcoder (sparse features that read its input and write its output) plus "
    "an error term; with attention patterns and norm scales frozen, the model is linear between feature "
    "activations, so every edge below is one node's exact contribution to another's input. "
    "The first position is the attention sink: models park attention there and write large, near-constant "
    'vectors that say little about the prompt, so its features are folded into one blue "sink" node per '
    "layer (their effect still counted, edges still exact) and the kept features are about the prompt's words."
)


def settings(run: PromptRun) -> GraphView:
    """The target token (typed text that is not one token says why and stops the page) and the thresholds."""
    try:
        target = graph_panels.pick_target(run.lm)
    except ValueError as e:
        st.error(message(e))
        st.stop()
    return GraphView(target, *graph_panels.thresholds())


def graph(run: PromptRun, view: GraphView):
    """The run's graph, pruned, and its file; None (the page stops) where no transcoder set opens."""
    gr = graph_run.open_run(run, view.target, SETTINGS)
    if gr is None:
        st.stop()
    try:
        return (
            gr,
            gr.graph(),
            gr.pruned(view.node_threshold, view.edge_threshold),
            gr.file(view.node_threshold, view.edge_threshold),
        )
    except ValueError as e:
        st.error(message(e))
        st.stop()


def main() -> None:
    sidebar.render()
    st.title("Attribution graph")
    needs.next_token_head("The attribution graph")
    st.caption(INTRO)
    run = current_run(refuse_over=SETTINGS.max_tokens)
    view = settings(run)
    gr, g, pruned, gf = graph(run, view)
    piece = run.lm.tokenizer.display_piece(g.target.token)
    if g.target.kind == "difference":
        piece += " − " + run.lm.tokenizer.display_piece(g.target.versus)
    graph_panels.scores(g, pruned, piece)
    options = graph_panels.feature_options(g, gf)
    if not options:
        st.info("No feature node holds enough influence to be kept: lower the node threshold.")
        graph_panels.export(gf)
        st.stop()
    meanings = graph_features.features(gr)
    supernodes = graph_panels.supernode_panel(g, run.labels, options)
    graph_panels.figure(gf, options, piece, supernodes)
    graph_features.search(g, meanings, run.labels, options)
    graph_panels.node_panel(gr, g, run.labels, options, meanings)
    graph_intervention.intervention_panel(gr, g, run.labels, options, piece)
    graph_panels.export(gf)


main()
