"""Issue #40: the state fuzzer (tests/app/fuzz.py) in CI: one seeded random walk per (page, model),
a fixed number of steps each (fuzz.ci_steps), then the crashes it found, each replayed as a test.

Longer walks: TFM_FUZZ_STEPS=200 TFM_FUZZ_SEED=7 pytest tests/app/test_fuzz.py -k tour, or
python -m tests.app.fuzz --steps 500 --seed 7 --page tour --model smollm2 (every failure, not the first)."""

from __future__ import annotations

import json
import os
import random

import pytest

import tfm
from ui import models

from tests.app import fuzz, fuzz_files
from tests.app.conftest import as_shown
from tests.app.fuzz import Link, Move, replay
from tests.app.judge import long_messages
from tests.app.matrix import PROMPT, open_cell

STEPS = int(os.environ.get("TFM_FUZZ_STEPS", "0"))  # 0: CI's count per (page, model)
SEED = int(os.environ.get("TFM_FUZZ_SEED", "0"))


@pytest.mark.parametrize(("page", "model"), fuzz.cells(), ids=[f"{p}-{m}" for p, m in fuzz.cells()])
def test_random_walk(page, model, experiments_once):
    n = STEPS or fuzz.ci_steps(page, model)
    w = fuzz.walk(page, model, fuzz.cell_seed(SEED, page, model), n)
    assert w.failure is None, w.report()
    assert len(w.steps) == n


@pytest.fixture(scope="module")
def graph_json():
    """A graph file of the bundled model (a small random transcoder set: what is tampered is the file)."""
    from tfm.analysis.graph.build import attribution_graph
    from tfm.analysis.graph.files import graph_file
    from tfm.analysis.graph.prune import prune_graph
    from tfm.analysis.dictionaries.transcoder import random_transcoders
    from tfm.text.token_view import token_labels

    lm = tfm.load("default")
    ts = random_transcoders(lm.config, 64, 6, seed=1)
    ids = lm.tokenizer.prompt_ids(PROMPT)
    g = attribution_graph(lm, ids, ts)
    return graph_file(prune_graph(g, 1.0, 1.0), token_labels(lm.tokenizer, ids), lm.config, ts).to_json()


def test_tampered_files(graph_json, tmp_path):
    """Issue #51: files that decode but break what reads them (fuzz_files.py), drawn at random."""
    n = STEPS or fuzz_files.CI_FILES
    found = fuzz_files.walk(fuzz.cell_seed(SEED, "files", "bundled"), n, tfm.load("default"), graph_json)
    assert not found, found


@pytest.fixture
def fresh_cache():
    models.PROMPTS.clear()  # the pages' SAE and calibration are cached by model: read the tampered ones
    yield
    models.PROMPTS.clear()


@pytest.mark.parametrize(
    ("page", "kind"), [("attribution_graph", "transcoders"), ("features", "sae"), ("steer", "calibration")]
)
def test_a_page_on_a_tampered_file_shows_one_short_message(tmp_path, monkeypatch, fresh_cache, page, kind):
    """A random tamper of the file the page reads (seeded as the walks are): a message, no traceback."""
    from tfm.analysis.dictionaries import features
    from tfm.analysis.graph import view as graph_view
    from tfm.analysis.steering import files as steer_files

    cases = {
        "transcoders": fuzz_files.TAMPERED_TRANSCODERS,
        "sae": fuzz_files.TAMPERED_SAES,
        "calibration": fuzz_files.TAMPERED_CALIBRATIONS,
    }[kind]
    name = random.Random(fuzz.cell_seed(SEED, page, kind)).choice(sorted(cases))
    if kind == "calibration":
        data = json.loads(fuzz_files.STEER_DEFAULT.read_text())
        cases[name][0](data)
        (tmp_path / "default.json").write_text(json.dumps(data))
        monkeypatch.setattr(steer_files, "STEER_ROOT", tmp_path)
    else:
        folder = fuzz_files.tampered_folder(kind, name, tmp_path)
        module, attr = (graph_view, "TRANSCODER_ROOT") if kind == "transcoders" else (features, "SAE_ROOT")
        monkeypatch.setattr(module, attr, folder.parent)
    with fuzz.fuzzing():
        at = open_cell(page, None)
    assert not at.exception, (name, [e.message[:300] for e in at.exception])
    shown = [as_shown(m.value) for m in [*at.error, *at.warning, *at.info]]
    assert any(cases[name][1] in m for m in shown), (name, shown)
    assert not long_messages(at), (name, long_messages(at))


def test_a_walk_is_the_same_walk_again_from_its_seed():
    one, two = (fuzz.walk("attention", "bundled", 11, 6) for _ in range(2))
    assert repr(one.steps) == repr(two.steps) and not one.failure
    assert isinstance(one.steps[0], Link) and any(isinstance(s, Move) for s in one.steps)
    replay(eval(repr(one.steps), vars(fuzz)))  # the printed steps are Python that runs again


def test_replay_reports_an_illegal_link_value_the_page_says_nothing_about():
    # "present" takes any text (anything but 1/true is off): a step that calls it illegal wants a
    # message, and the page rightly shows none, so the judge must fail it.
    with pytest.raises(AssertionError, match="no message names the illegal link value present"):
        replay([Link("tour", "bundled", {"present": "abc"}, "illegal", ("present",))])


# --- crashes and silent changes the fuzzer found (issue #40), as it found them


def test_link_to_a_device_the_server_lacks_says_so():
    """device=<anything but this server's> was replaced by the CPU without a word."""
    at = replay([Link("tokens", "bundled", {"device": "inf"}, "illegal", ("device",))])
    assert any("Ignored the link's device=inf" in w.value and "cpu" in w.value for w in at.warning), [
        w.value for w in at.warning
    ]
    assert at.session_state["sidebar.device"] == "cpu"


def test_features_link_to_a_feature_past_the_sae_says_so():
    """feature=99999999999999999999 opened another feature without a word."""
    at = replay([Link("features", "bundled", {"feature": "99999999999999999999"}, "illegal", ("feature",))])
    shown = [as_shown(w.value) for w in at.warning]
    assert any(w.startswith("Ignored the link's feature=99999999999999999999: ") for w in shown), shown
    assert 0 <= at.number_input(key="features.feature").value <= at.number_input(key="features.feature").max


def test_steer_from_an_sae_feature_on_a_model_without_an_sae_is_an_info():
    """The 'SAE feature' source on a model that ships no SAE was an error box; the Features page says
    the same thing as an info, and the prompt pair still works."""
    at = replay([Link("steer", "mqa", {}, "legal"), Move("radio", "steer.source", "SAE feature")])
    assert any("no sparse autoencoder ships" in i.value for i in at.info), [i.value for i in at.info]


# Grouped-query attention: the Tour indexed k and v by the query head (worktree gqa fixes it).


def test_tour_at_head_3_on_the_gqa_model():
    replay([Link("tour", "smollm2-gqa", {"head": "3"}, "legal")])


def test_tour_at_head_1_on_the_mqa_model():
    replay([Link("tour", "mqa", {"head": "1", "step": "qkv"}, "legal")])


def test_graph_thresholds_at_their_extremes():
    """Issue #51: both graph sliders at 1.0 (every edge of the graph between kept nodes) and at 0.5,
    as the walks draw them (fuzz_values.EXTREMES), on the bundled model and its trained set."""
    at = replay(
        [
            Link("attribution_graph", "bundled", {}, "legal"),
            Move("slider", "graph.node_threshold", 1.0),
            Move("slider", "graph.edge_threshold", 1.0),
            Move("slider", "graph.node_threshold", 0.5),
            Move("slider", "graph.edge_threshold", 0.5),
        ]
    )
    assert at.slider(key="graph.edge_threshold").value == 0.5
    assert any(m.label == "Features kept" for m in at.metric)
