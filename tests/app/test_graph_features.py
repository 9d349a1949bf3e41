"""The Attribution graph page shows an opened feature's label and top-activating held-out
contexts from the set's shipped files (`tfm.analysis.dictionaries.transcoder_features`), equal to what the
engine reads from them, and finds kept features by label; a set without them says how to make
them. On SmolLM2's " Paris" graph every kept feature has a label and contexts, and opened ones show them."""

from __future__ import annotations

import html
import shutil

import pytest

import tfm
from tests.app.conftest import as_shown
from tests.app.matrix import open_cell
from tfm.analysis.dictionaries.transcoder import load_transcoders
from tfm.analysis.dictionaries.transcoder_features import read_features
from tfm.analysis.graph import view as graph_view
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.files import graph_file
from tfm.analysis.graph.prune import prune_graph
from tfm.text.token_view import token_labels

PROMPT = "The cat sat on the mat. The cat"
PARIS = "The capital of France is"
SETTINGS = GraphSettings(max_tokens=64)  # the page's


def engine(lm, spec: str, prompt: str):
    """The set, its shipped meanings, the graph and the kept feature nodes (most influential first)."""
    folder = graph_view.shipped_folder(spec)
    ts = load_transcoders(folder, lm)
    g = attribution_graph(lm, lm.tokenizer.prompt_ids(prompt), ts, settings=SETTINGS)
    gf = graph_file(prune_graph(g), token_labels(lm.tokenizer, g.ids), lm.config, ts)
    kept = [n.id for n in sorted(gf.nodes, key=lambda n: -n.influence) if n.kind == "feature"]
    return read_features(folder, ts, lm), g, kept


def boxes(at) -> list[str]:
    return [as_shown(b.value) for b in [*at.error, *at.warning, *at.exception]]


def shown_meaning(at, lm, tf, g, node: int) -> None:
    """The opened node's label line and contexts equal the engine's."""
    layer, _, f = g.features[node].tolist()
    entry, contexts = tf.entry(layer, f), tf.contexts(layer, f)
    labels = [as_shown(m.value) for m in at.markdown if m.value.startswith("**Label:**")]
    assert len(labels) == 1 and labels[0].startswith(f"**Label:** {entry.label}"), labels
    assert f"fires on {100 * tf.freq(layer, f):.2f}% of held-out tokens" in labels[0]
    assert contexts, (layer, f)
    drawn = [m.value for m in at.markdown if m.value.startswith("<div")]
    assert len(drawn) == 1
    lines = drawn[0].split("\n")
    assert len(lines) == len(contexts)
    top = max(c.activation for c in contexts)
    for line, c in zip(lines, contexts):
        peak = html.escape(lm.tokenizer.decode([c.ids[c.peak]])).replace("\n", "⏎")
        alpha = min(1.0, c.activation / top)
        spans = line.split("</span>")
        assert len(spans) == len(c.ids) + 1  # one span per context token
        assert spans[c.peak].endswith(
            f'<span title="{c.activation:.3f}" style="background: rgba(255,140,0,{alpha:.2f}); white-space: pre; '
            f'border-radius: 3px">{peak}'
        )
        assert all('title="0.000"' in s for j, s in enumerate(spans[:-1]) if j != c.peak)
    caption = next(as_shown(c.value) for c in at.caption if "the token it fires hardest on" in c.value)
    assert ", ".join(f"{c.domain} {c.activation:.2f}" for c in contexts) in caption


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default")


def test_an_opened_feature_shows_its_shipped_label_and_contexts(lm):
    tf, g, kept = engine(lm, "default", PROMPT)
    assert tf is not None, "the bundled set ships its labels (python -m tfm.train.transcoder_labels)"
    at = open_cell("attribution_graph", None, params={"prompt": PROMPT})
    assert not boxes(at), boxes(at)
    for node in kept[:4]:
        at.selectbox(key="graph.node").set_value(node).run()
        assert not boxes(at), boxes(at)
        shown_meaning(at, lm, tf, g, node)


def test_the_search_finds_kept_features_by_label_and_opens_one(lm):
    tf, g, kept = engine(lm, "default", PROMPT)
    at = open_cell("attribution_graph", None, params={"prompt": PROMPT})
    where = {tuple(g.features[i].tolist()[::2]): i for i in kept}
    layer, f = next(iter(where))
    word = tf.entry(layer, f).tokens[0]
    want = [where[p] for p in tf.search(word, 50, among=list(where))]
    at.text_input(key="graph.search").set_value(word).run()
    assert not boxes(at), boxes(at)
    found = next(d.value for d in at.dataframe if "label" in d.value.columns)  # the matches' table
    assert found["id"].tolist() == want and where[(layer, f)] in want
    assert found["label"].tolist() == [tf.label(*g.features[i].tolist()[::2]) for i in want]
    at.selectbox(key="graph.match").set_value(want[-1])
    at.button(key="graph.open").click().run()
    assert at.selectbox(key="graph.node").value == want[-1]
    shown_meaning(at, lm, tf, g, want[-1])


def test_a_set_without_labels_says_how_to_make_them(lm, tmp_path, monkeypatch):
    shutil.copytree(
        graph_view.shipped_folder("default"),
        tmp_path / "default",
        ignore=shutil.ignore_patterns("features_*", "labels_*", "contexts.*"),
    )
    monkeypatch.setattr(graph_view, "TRANSCODER_ROOT", tmp_path)
    at = open_cell("attribution_graph", None, params={"prompt": PROMPT})
    assert not boxes(at), boxes(at)
    assert any(
        "No labels or top-activating contexts ship" in c.value and "tfm.train.transcoder_labels" in c.value
        for c in at.caption
    )
    assert not [m for m in at.markdown if m.value.startswith("**Label:**")]


@pytest.mark.slow
def test_every_kept_feature_of_the_smollm2_paris_graph_shows_a_label_and_contexts():
    real = tfm.load("smollm2")
    tf, g, kept = engine(real, "smollm2", PARIS)
    assert tf is not None, "SmolLM2's set ships its labels (python -m tfm.train.transcoder_labels)"
    assert real.tokenizer.decode([g.target.token]) == " Paris"
    at = open_cell("attribution_graph", "smollm2", params={"prompt": PARIS}, timeout=600)
    assert not boxes(at), boxes(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Features kept"] == f"{len(kept):,} / {g.n_features:,}"
    # What an opened node shows is read from these two (the page's drawing of them is checked equal on
    # the strongest and the weakest kept features below): every kept feature has both.
    empty = [
        n
        for n in kept
        if not tf.entry(*g.features[n].tolist()[::2]).label or not tf.contexts(*g.features[n].tolist()[::2])
    ]
    assert not empty, f"{len(empty)} of {len(kept)} kept features lack a label or contexts"
    for node in [*kept[:3], *kept[-3:]]:  # one page run each: 579 of them took 30 minutes
        at.selectbox(key="graph.node").set_value(node).run()
        assert not boxes(at), boxes(at)
        shown_meaning(at, real, tf, g, node)
