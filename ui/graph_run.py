"""The Attribution graph page's typed run: the sidebar's prompt (`ui.run.PromptRun`), the model's
shipped transcoder set, a target and the graph's settings. It owns the cache keys of what the
page draws (the graph, its pruned view and file, interventions), each keyed by the set's folder
and its files' sizes and times, so a set trained again while the server runs is read again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from services import memory
from tfm.analysis.dictionaries.transcoder import TranscoderSet, load_transcoders
from tfm.analysis.dictionaries.transcoder_features import TranscoderFeatures, read_features
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import Graph, GraphSettings, Target, attribution_graph
from tfm.analysis.graph.edit import FeatureEdit, Intervention, intervene
from tfm.analysis.graph.files import GraphFile, graph_file
from tfm.analysis.graph.prune import Pruned, prune_graph
from ui.progress import fraction_bar
from ui.run import PromptRun
from ui.text import message

__all__ = ["GraphRun", "GraphSettings", "open_run"]  # GraphSettings: the page's, from tfm.analysis.graph


def _load(lm, folder: str, _stamp: tuple) -> TranscoderSet:
    return load_transcoders(folder, lm)


@dataclass(frozen=True)
class GraphRun:
    """One prompt's attribution graph for one target and settings, with the model's transcoders."""

    run: PromptRun
    folder: str
    stamp: tuple[int, ...]
    target: Target
    settings: GraphSettings

    def _derived(self, name: str, fn, *args, **options):
        return self.run._derived(name, fn, self.folder, self.stamp, *args, **options)

    def _of_graph(self, name: str, fn, *args, **options):
        """`_derived` of this graph: keyed by the prompt, the target and the settings, then `args`."""
        return self._derived(name, fn, self.run.ids, self.target, self.settings, *args, **options)

    def transcoders(self) -> TranscoderSet:
        """The set, checked against the model (ValueError: a missing file, another model's width)."""
        return self._derived("graph.transcoders", _load, status="Reading the transcoders…")

    def features(self) -> TranscoderFeatures | None:
        """The set's shipped labels and top contexts (`transcoder_features.read_features`), None
        without them; ValueError when a file is broken."""
        ts = self.transcoders()
        return self._derived(
            "graph.features",
            lambda lm, folder, _stamp: read_features(folder, ts, lm),
            status="Reading the features' labels…",
        )

    def graph(self) -> Graph:
        """The whole graph (before pruning), with a progress bar; stopped once no page waits."""
        ts = self.transcoders()

        def compute(lm, _folder, _stamp, ids, target, settings, should_stop=None):
            bar = fraction_bar(f"Attribution graph of {len(ids)} tokens")
            g = attribution_graph(lm, ids, ts, target, settings, progress=bar, should_stop=should_stop)
            bar(1.0)
            return g

        return self._of_graph("graph.graph", compute, stoppable=True)

    def pruned(self, node_threshold: float, edge_threshold: float) -> Pruned:
        """The view at these thresholds (at most `graph_prune.MAX_EDGES` edges), with a progress bar;
        stopped once no page waits."""
        g = self.graph()

        def compute(lm, *_, should_stop=None):
            bar = fraction_bar(f"Pruning {g.n_nodes:,} nodes")
            try:
                return prune_graph(g, node_threshold, edge_threshold, progress=bar, should_stop=should_stop)
            finally:
                memory.release_freed()  # its blocks of rows (tens of MB each) stay in the heap's arenas otherwise

        return self._of_graph("graph.pruned", compute, node_threshold, edge_threshold, stoppable=True)

    def file(self, node_threshold: float, edge_threshold: float) -> GraphFile:
        """The pruned graph as its JSON export holds it (what the figure draws), with a status line;
        stopped once no page waits."""
        pruned, ts = self.pruned(node_threshold, edge_threshold), self.transcoders()
        return self._of_graph(
            "graph.file",
            lambda lm, *_, should_stop=None: graph_file(pruned, self.run.labels, lm.config, ts, should_stop),
            node_threshold,
            edge_threshold,
            stoppable=True,
            status=f"Listing {pruned.n_edges:,} edges…",
        )

    def off_effects(self, node: int) -> dict[str, float]:
        """`graph_view.off_effects`: the graph's predictions for switching feature `node` off."""
        g = self.graph()
        return self._of_graph("graph.off", lambda lm, *_: graph_view.off_effects(g, node), node)

    def intervention(self, edits: tuple[FeatureEdit, ...]) -> Intervention:
        """The target before and after `edits` in the real model (this call only), beside the graph's
        prediction."""
        g, ts = self.graph(), self.transcoders()
        return self._of_graph(
            "graph.intervene", lambda lm, *_: intervene(lm, g.ids, ts, g.target, edits, graph=g), edits
        )


def open_run(run: PromptRun, target: Target, settings: GraphSettings) -> GraphRun | None:
    """The page's graph run, or None with one info saying how to train a set for this model."""
    folder = graph_view.shipped_folder(run.spec)
    if folder is None:
        st.info(
            "This model ships no transcoder set, and an attribution graph needs one (a transcoder per "
            "block that rewrites its MLP as sparse features). Train one with "
            f"`{graph_view.TRAIN_COMMAND}` (the bundled model and SmolLM2 ship theirs under "
            "assets/transcoders)."
        )
        return None
    try:
        missing = graph_view.missing_layers(folder)
    except ValueError as e:
        st.error(f"This model's transcoder set cannot be read: {message(e)}")
        return None
    if missing:
        st.info(
            f"This model's transcoder set is not finished: {len(missing)} of its layers are still to be trained "
            f"(from block {missing[0]}). Finish it with `{graph_view.TRAIN_COMMAND}` (a rerun trains only the "
            "missing layers)."
        )
        return None
    return GraphRun(run, str(folder), graph_view.folder_stamp(Path(folder)), target, settings)


def groups(g: Graph) -> dict[str, list[int]]:
    """This graph's supernodes (name -> node ids) in session state: another prompt or target starts
    with none (node ids are a graph's own)."""
    ss, key = st.session_state, (g.ids, g.target, g.transcoders)
    if ss.get("graph.groups_of") != key:
        ss["graph.groups_of"], ss["graph.groups"] = key, {}
    return ss["graph.groups"]
