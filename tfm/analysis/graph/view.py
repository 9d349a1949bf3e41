"""What the Attribution graph page reads beside the engine (graph.py): the transcoder set a model
ships, a target from typed text, a node's name, its strongest inputs and outputs, what a feature's
decoder row writes, and the edits of an intervention.

    folder = shipped_folder("default")               # assets/transcoders/default, or None
    target = target_from_text(lm, "token", " Paris")  # ValueError when the text is not one token
    node_inputs(g, i, 8)                              # [(source node, weight)], strongest first
    decoder_tokens(lm, ts, layer, feature, 8)         # the tokens its W_dec row promotes and suppresses

Inputs and outputs are the graph's own edges (`Graph.edges`, before pruning): node i's inputs are
its row, its outputs its column over every row.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.escape import short
from ...loaders.loading import ASSETS, is_asset_name
from ..attribution import n_words, token_id
from .build import Graph, Target
from .edit import FeatureEdit, predicted_change
from ..steering.vectors import read_out
from ..dictionaries.transcoder import CARD_FILE, layer_file, read_card

TRANSCODER_ROOT = ASSETS / "transcoders"
TRAIN_COMMAND = "python -m tfm.train.transcoders --model MODEL --out assets/transcoders/MODEL"


def shipped_folder(spec: str, root: Path | None = None) -> Path | None:
    """`root`/<spec> (default assets/transcoders) when the model of this spec text ships a
    transcoder set there (a card in it), else None. Specs that are not plain names (a path, a
    random model's JSON) never ship one."""
    root = TRANSCODER_ROOT if root is None else root
    if not is_asset_name(spec):
        return None
    folder = root / spec
    card = folder / CARD_FILE
    return folder if card.is_symlink() or card.exists() else None  # a broken card: the loader says how


def missing_layers(folder: Path) -> list[int]:
    """The layers whose file a set's card promises but the folder lacks (a set still training);
    ValueError for an unreadable card. A file that is there but broken (a link loop, a folder) is
    not missing: the loader says what is wrong with it."""
    n_layer = read_card(folder)["config"].n_layer
    paths = [Path(folder) / layer_file(i) for i in range(n_layer)]
    return [i for i, p in enumerate(paths) if not (p.is_symlink() or p.exists())]


def folder_stamp(folder: Path) -> tuple[int, ...]:
    """What changes when a folder's set is retrained (its files' sizes and times): a cache key part."""
    out = []
    for p in sorted(folder.glob("*")):
        if p.is_file():
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns]
    return tuple(out)


def target_from_text(lm, kind: str, token_text: str = "", versus_text: str = "") -> Target:
    """The graph's target from a page's choice: "top", or typed token text ("token"), or two
    ("difference"); ValueError when a text is empty or not one token of the model."""
    if kind == "top":
        return Target()
    if kind not in ("token", "difference"):
        raise ValueError(f"target kind {short(kind)!r}: choose top, token or difference")
    words = n_words(lm)
    texts = [("token", token_text)] + ([("versus token", versus_text)] if kind == "difference" else [])
    ids = []
    for what, text in texts:
        if not text:
            raise ValueError(f"type the {what} to explain (one token of the vocabulary, e.g. ' Paris')")
        ids.append(token_id(lm.tokenizer, text, words))
    return Target(kind, *ids)


def node_name(g: Graph, i: int, labels) -> str:
    """A short readable name of node i: 'L3 #120 at “ cat”', 'error L3 at …', 'token “ cat”'."""
    info = g.node(i)
    at = f"“{labels[info['pos']]}”"
    if info["kind"] == "feature":
        return f"L{info['layer']} #{info['feature']} at {at}"
    if info["kind"] == "error":
        return f"error L{info['layer']} at {at}"
    if info["kind"] == "sink":
        return f"sink L{info['layer']} at {at}"
    if info["kind"] == "target":
        return "target"
    return f"{info['kind']} {at}"


def node_names(g: Graph, nodes, labels) -> dict[int, str]:
    """{node: `node_name`} for many nodes at once (a page's pickers list thousands at 1.0 / 1.0)."""
    feats, out = g.features.tolist(), {}
    for i in nodes:
        if i < g.n_features:
            layer, pos, f = feats[i]
            out[i] = f"L{layer} #{f} at “{labels[pos]}”"
        else:
            out[i] = node_name(g, i, labels)
    return out


def opening_node(g: Graph, nodes) -> int:
    """The feature a page opens first among `nodes` (most influential first): the first at the
    last position (where the prediction is made), else the first past position 0 (a real model's
    attention sink there holds much influence and says little), else the first."""
    nodes = [int(i) for i in nodes]
    if not nodes:
        raise ValueError("no feature node to open: lower the node threshold")
    for wanted in (lambda pos: pos == g.n_pos - 1, lambda pos: pos > 0):
        for i in nodes:
            if wanted(g.node(i)["pos"]):
                return i
    return nodes[0]


def _strongest(weights: torch.Tensor, nodes: torch.Tensor, k: int) -> list[tuple[int, float]]:
    nonzero = weights != 0
    w, n = weights[nonzero], nodes[nonzero]
    order = torch.argsort(-w.abs())[:k]
    return [(int(n[j]), float(w[j])) for j in order]


def node_inputs(g: Graph, i: int, k: int = 8) -> list[tuple[int, float]]:
    """The `k` strongest incoming edges of node i as (source node, weight), strongest first (only
    features and the target have inputs: others get [])."""
    rows = g.row_nodes()
    hit = (rows == i).nonzero()
    if not hit.numel():
        return []
    return _strongest(g.edges[int(hit[0, 0])], torch.arange(g.n_nodes), k)


def node_outputs(g: Graph, i: int, k: int = 8) -> list[tuple[int, float]]:
    """The `k` strongest outgoing edges of node i as (target node, weight), strongest first."""
    return _strongest(g.edges[:, i], g.row_nodes(), k)


def decoder_tokens(lm, transcoders, layer: int, feature: int, n: int = 8):
    """What feature `feature` of block `layer` writes, read through the final norm and the
    unembedding (`steering.read_out` of its W_dec row): (ids up, scores up, ids down, scores down)."""
    return read_out(lm, transcoders.layers[layer].W_dec[feature], n)


def feature_edits(g: Graph, nodes, value: float | None) -> tuple[FeatureEdit, ...]:
    """Edits setting each feature node of `nodes` to `value` (None: switch it off, value 0)."""
    out = []
    for i in nodes:
        info = g.node(int(i))
        if info["kind"] != "feature":
            raise ValueError(f"node {int(i)} is a {info['kind']} node: only features can be switched off or clamped")
        out.append(FeatureEdit(info["layer"], info["pos"], info["feature"], 0.0 if value is None else float(value)))
    return tuple(out)


# Each prediction named by what it sums, the same wherever it is shown (edit.predicted_change)
PREDICTIONS = {
    "direct": ("direct edges", "the chosen features' own edges into the target"),
    "total": (
        "all edges",
        "their edges into the target and, through feature-to-feature edges, every "
        "later feature's (as if those stayed linear)",
    ),
    "first_order": (
        "slopes",
        "their slopes: the real model's derivative, norm scales and attention patterns live (first order)",
    ),
}


def off_effects(g: Graph, node: int) -> dict[str, float]:
    """The target's change the graph predicts if feature `node` is switched off, by each of
    `PREDICTIONS` (mode -> change)."""
    edit = [FeatureEdit(*(int(v) for v in g.features[node]), value=0.0)]
    return {mode: predicted_change(g, edit, mode) for mode in PREDICTIONS}
