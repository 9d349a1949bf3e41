"""Panels of the Attribution graph page: the target and thresholds, the figure (a click opens a
node), one node's details, supernodes and the export (interventions: ui/graph_intervention.py). Numbers come from the page's
`ui.graph_run.GraphRun`; what they mean from tfm.analysis.graph.view."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import Graph, Target
from tfm.analysis.graph.files import GraphFile
from tfm.analysis.graph.prune import MAX_EDGES, Pruned
from tfm.viz import graph as graph_figs
from tfm.viz import graph_groups
from ui import charts, graph_features, links
from ui.graph_run import GraphRun, groups
from ui.text import plain

KINDS = {"top": "the top token", "token": "a token I type", "difference": "logit difference of two tokens"}
N_LINKS, N_TOKENS = 8, 8
MAX_GROUPS = 12


def pick_target(lm) -> Target:
    """The target widgets; ValueError when typed text is not one token (the page shows it)."""
    for key, what in (("graph.token", "token to explain"), ("graph.versus", "versus token")):
        links.cap_text(key, what, links.LINK_VALUE_CHARS)
    c1, c2, c3 = st.columns([2, 2, 2])
    kind = c1.radio("Explain", list(KINDS), format_func=KINDS.get, key="graph.target_kind")
    # a field shows only where its kind reads it (a disabled one would hold a value no one can change)
    token = c2.text_input("Token (e.g. ' Paris')", key="graph.token") if kind != "top" else ""
    versus = c3.text_input("…versus token", key="graph.versus") if kind == "difference" else ""
    if kind != "top" and not token or kind == "difference" and not versus:
        st.info(
            "Type the token to explain"
            + (" and the one to compare it with" if kind == "difference" else "")
            + " (one token of the vocabulary: a leading space is often part of it, as in ' Paris')."
        )
        st.stop()
    if kind == "difference" and token == versus:
        st.info("Type two different tokens: a token's logit minus its own is always 0.")
        st.stop()
    return graph_view.target_from_text(lm, kind, token, versus)


def thresholds() -> tuple[float, float]:
    c1, c2 = st.columns(2)
    node = c1.slider(
        "Keep the nodes holding this share of the influence", 0.5, 1.0, 0.8, 0.01, key="graph.node_threshold"
    )
    edge = c2.slider(
        "Keep the edges holding this share of the edge scores", 0.5, 1.0, 0.98, 0.01, key="graph.edge_threshold"
    )
    return float(node), float(edge)


def scores(g: Graph, pruned: Pruned, piece: str) -> None:
    c = st.columns(4) + st.columns(4)  # two rows: "1,224 / 1,440" does not fit a sixth of the page
    c[0].metric(f"p({plain(piece, 30)})", f"{g.prob:.4f}", help="the real model's probability of the target token")
    c[1].metric("Target logit" + (" difference" if g.target.kind == "difference" else ""), f"{g.logit:.3f}")
    c[2].metric(
        "Replacement score",
        f"{pruned.replacement:.3f}",
        help="share of the influence from the prompt that reaches the target through features, not errors",
    )
    c[3].metric(
        "Completeness score",
        f"{pruned.completeness:.3f}",
        help="how much of each node's input the graph explains by features (errors explain nothing)",
    )
    c[4].metric(
        "Features kept",
        f"{int(pruned.nodes[: g.n_features].sum()):,} / {g.n_features:,}",
        help=f"features with rows in the graph (the most influential of those active) kept at this "
        f"threshold; nodes hold {pruned.node_share:.0%} of the influence, edges "
        f"{pruned.edge_share:.0%} of the edge scores",
    )
    c[5].metric(
        "Active features",
        f"{g.n_active:,}",
        help="transcoder features active anywhere in the prompt; "
        "those without a row in the graph count in its error nodes",
    )
    c[6].metric(
        "Edges kept", f"{pruned.n_edges:,}", help=f"of the {pruned.n_candidates:,} non-zero edges between kept nodes"
    )
    if pruned.capped:
        st.info(
            f"This view keeps the strongest {pruned.n_edges:,} of the {pruned.n_candidates:,} edges between "
            f"kept nodes (they hold {pruned.edge_share:.0%} of the edge scores): a view keeps at most "
            f"{MAX_EDGES:,}, and the figure draws the strongest {graph_figs.DRAWN_EDGES}. Lower the edge "
            "threshold for a view that holds its share."
        )


def feature_options(g: Graph, gf: GraphFile) -> list[int]:
    """The drawn feature nodes, the one a page opens first (`graph_view.opening_node`), then the
    rest most influential first: the node picker's and the edit list's order."""
    nodes = [n.id for n in sorted(gf.nodes, key=lambda n: -n.influence) if n.kind == "feature"]
    if not nodes:
        return []
    first = graph_view.opening_node(g, nodes)
    return [first] + [i for i in nodes if i != first]


def picker_name(g: Graph, labels, i: int) -> str:
    """Node i's name in a picker: this session keeps one graph's names (three pickers list the
    same thousands of features at 1.0 / 1.0)."""
    ss, key = st.session_state, (g.ids, g.target, g.transcoders, tuple(labels))
    if ss.get("graph.names_of") != key:
        ss["graph.names_of"], ss["graph.names"] = key, graph_view.node_names(g, range(g.n_features), labels)
    return ss["graph.names"].get(i) or graph_view.node_name(g, i, labels)[:120]


def _pick(options: list[int]) -> None:
    """A click on the figure opens that node (the node picker is the keyboard's way)."""
    for p in st.session_state["graph.chart"].selection.get("points", []):
        data = p.get("customdata")
        node = data[0] if isinstance(data, list) and data else data
        if isinstance(node, (int, float)) and int(node) in options:
            st.session_state["graph.node"] = int(node)
            return


def figure(gf: GraphFile, options: list[int], piece: str, supernodes: dict[str, list[int]]) -> None:
    fig = graph_figs.graph_figure(gf, target_label=piece)
    graph_groups.add_supernodes(fig, gf, supernodes)
    chosen = st.session_state.get("graph.node")
    graph_groups.mark_node(fig, gf, chosen if chosen in options else options[0])
    charts.show(fig, "attribution-graph", key="graph.chart", on_select=lambda: _pick(options), selection_mode="points")


def _links_table(g: Graph, found: list[tuple[int, float]], labels, key: str) -> None:
    if not found:
        st.caption("None: only features and the target have inputs here.")
        return
    st.dataframe(
        pd.DataFrame(
            {
                "node": [graph_view.node_name(g, n, labels) for n, _ in found],
                "id": [n for n, _ in found],
                "weight": [w for _, w in found],
            }
        ),
        hide_index=True,
        key=key,
    )


def node_panel(gr: GraphRun, g: Graph, labels, options: list[int], tf=None) -> int | None:
    """The node picker and the chosen feature's details (with `tf`, the set's shipped
    `TranscoderFeatures`: its label and top contexts); returns it."""
    if st.session_state.get("graph.node") not in options:  # another graph's node: the opening one (first)
        st.session_state.pop("graph.node", None)
    node = st.selectbox(
        "Open a feature (or click one in the graph)",
        options,
        key="graph.node",
        format_func=lambda i: picker_name(g, labels, i),
    )
    info = g.node(node)
    st.markdown(f"**{plain(graph_view.node_name(g, node, labels), 120)}** · activation {info['activation']:.3f}")
    says = gr.off_effects(node)
    st.caption(
        "Switched off, the target's predicted change: "
        + " · ".join(f"{graph_view.PREDICTIONS[m][0]} {says[m]:+.3f}" for m in graph_view.PREDICTIONS)
        + " (the panel below measures the real change). Direct edges sum its own edges into the target, all "
        "edges follow feature-to-feature edges too; both hold norm scales and attention patterns fixed, "
        "slopes let them move."
    )
    graph_features.meaning(tf, gr.run.lm.tokenizer, info["layer"], info["feature"])
    _writes(gr, info)
    c1, c2 = st.columns(2)
    with c1:
        st.markdown("**Strongest inputs** (edge weights into it)")
        _links_table(g, graph_view.node_inputs(g, node, N_LINKS), labels, "graph.inputs")
    with c2:
        st.markdown("**Strongest outputs** (its edges into later nodes)")
        _links_table(g, graph_view.node_outputs(g, node, N_LINKS), labels, "graph.outputs")
    return node


def _writes(gr: GraphRun, info: dict) -> None:
    """The tokens the feature's decoder writes toward and against most."""
    tok = gr.run.lm.tokenizer
    up, up_s, down, down_s = graph_view.decoder_tokens(
        gr.run.lm, gr.transcoders(), info["layer"], info["feature"], N_TOKENS
    )
    st.markdown(
        "**Writes toward** "
        + ", ".join(f"{plain(tok.display_piece(i), 30)} ({s:+.2f})" for i, s in zip(up, up_s))
        + "  \n**Writes against** "
        + ", ".join(f"{plain(tok.display_piece(i), 30)} ({s:+.2f})" for i, s in zip(down, down_s))
    )


def supernode_panel(g: Graph, labels, options: list[int]) -> dict[str, list[int]]:
    """Group nodes by hand into named supernodes (kept in this session for this graph)."""
    found = groups(g)
    with st.expander("Supernodes: group features into one named box"):
        c1, c2 = st.columns([3, 2])
        chosen = c1.multiselect(
            "Features", options, key="graph.group_nodes", format_func=lambda i: picker_name(g, labels, i)
        )
        name = c2.text_input("Name", key="graph.group_name", max_chars=40)
        if st.button("Add the group", key="graph.group_add"):
            if not chosen or not name.strip():
                st.warning("Pick at least one feature and give the group a name.")
            elif len(found) >= MAX_GROUPS and name not in found:
                st.warning(f"At most {MAX_GROUPS} groups: remove one first.")
            else:
                found[name.strip()] = [int(i) for i in chosen]
        for j, (group, nodes) in enumerate(list(found.items())):
            c1, c2 = st.columns([5, 1])
            c1.markdown(
                f"**{plain(group, 40)}**: " + ", ".join(plain(graph_view.node_name(g, i, labels), 60) for i in nodes)
            )
            if c2.button("Remove", key=f"graph.group_remove.{j}"):
                found.pop(group)
                st.rerun()
    return {k: v for k, v in found.items() if any(i in options for i in v)}


def export(gf: GraphFile) -> None:
    st.download_button(
        "Download the graph (.json)",
        gf.to_json,
        file_name="attribution_graph.json",
        mime="application/json",
        key="graph.download",
        on_click="ignore",
    )
