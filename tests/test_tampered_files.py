"""Files that decode but break things (issue #51): every field of a shipped or user-given file is
checked after decoding, and each failure is one short ValueError. The cases are the fuzzer's
generators (tests/app/fuzz_files.py), each applied to a copy of a shipped file of the bundled model."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import tfm
from tfm.analysis.graph.files import graph_file, load_graph_json
from tfm.analysis.graph.prune import prune_graph
from tfm.analysis.dictionaries.features import SAE_ROOT, load_features
from tfm.analysis.graph.build import GraphSettings, attribution_graph
from tfm.analysis.graph.files import GraphEdge
from tfm.analysis.dictionaries.transcoder import load_transcoders, random_transcoders
from tfm.text.token_view import token_labels
from tfm.viz.graph import graph_figure

from tests.app import fuzz_files as ff

pytestmark = pytest.mark.usefixtures("one_thread")
TRANSCODERS = "assets/transcoders/default"


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default")


@pytest.fixture(scope="module")
def graph_json(lm):
    ts = random_transcoders(lm.config, 64, 6, seed=1)
    ids = lm.tokenizer.prompt_ids("The cat sat on the mat. The cat")
    g = attribution_graph(lm, ids, ts, settings=GraphSettings(max_tokens=64))
    return graph_file(prune_graph(g), token_labels(lm.tokenizer, ids), lm.config, ts).to_json()


@pytest.mark.parametrize(("kind", "name"), ff.CASES, ids=[f"{k}-{n}" for k, n in ff.CASES])
def test_a_tampered_file_is_one_short_message(tmp_path, lm, graph_json, kind, name):
    assert ff.check(kind, name, lm, graph_json, tmp_path) is None


@pytest.mark.parametrize("weight", [0.0, 1e308, -1e308])
def test_the_figure_draws_any_finite_weights(graph_json, weight):
    gf = load_graph_json(graph_json)
    odd = type(gf)(**{**gf.__dict__, "edges": tuple(GraphEdge(e.source, e.target, weight) for e in gf.edges)})
    fig = graph_figure(odd)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert sum(len(t.x) for t in lines) == 3 * min(len(gf.edges), 400)
    widths = {t.line.width for t in lines}
    assert widths == ({0.5} if weight == 0 else {5.0})  # all equal: all the thinnest, or all the strongest


def test_the_shipped_files_pass_every_check(lm):
    load_transcoders(TRANSCODERS, lm)
    fs = load_features(SAE_ROOT / "default", lm)
    assert fs.card["metrics"]["l0"] > 0 and fs.data["hist"].shape[1] > 0


def test_links_inside_the_folder_are_followed(tmp_path, lm):
    folder = tmp_path / "set"
    shutil.copytree(TRANSCODERS, folder)
    (folder / "layer_00.safetensors").rename(folder / "real.safetensors")
    os.symlink("real.safetensors", folder / "layer_00.safetensors")
    ts = load_transcoders(folder, lm)
    assert torch.equal(ts.layers[0].W_enc, load_transcoders(TRANSCODERS, lm).layers[0].W_enc)
