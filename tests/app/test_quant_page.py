"""The Quantization page on a small Q4_1 GGUF file written here: the tables come from the header,
the block chart's numbers are the block's bytes decoded (equal to gguf.quants.dequantize), and
the re-quantized comparison equals tfm.analysis.quant.requantize.compare on a fresh re-quantized copy."""

from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import pytest

from tests.app.conftest import allow_models, chart_by_title, decode, open_page
from tests.app.test_shapes import frame
from tests.gguf_files import bytelevel_vocab, write_model
from tfm.analysis.quant import requantize as quant
from tfm.generation.generate import prepare_prompt
from tfm.loaders.gguf_file import read_gguf
from ui import cache, models
from services import server

PROMPT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quantpage")
    return write_model(folder / "small-q4_1.gguf", qtype="Q4_1", vocab=bytelevel_vocab(), seed=5)


def open_quant(path):
    allow_models(path.parent)
    at = open_page("quant", PROMPT)
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(path)).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at, models.load_lm(at.session_state["app.model_spec"], "cpu")


def test_tables_block_and_requantized_comparison(gguf_file):
    at, lm = open_quant(gguf_file)
    f = read_gguf(gguf_file)
    types = frame(at, "stored MiB")
    assert dict(zip(types["type"], types["tensors"])) == {k: v[0] for k, v in quant.tensor_table(f).by_type().items()}
    assert dict(zip(types["type"], types["bits per weight"])) == {"Q4_1": 5.0, "F32": 32.0}

    at.selectbox(key="quant.tensor").set_value("blk.1.ffn_up.weight")
    at.number_input(key="quant.row").set_value(17)
    at.number_input(key="quant.block").set_value(1).run()
    assert not at.exception, at.exception
    bv = quant.block_view(f, "blk.1.ffn_up.weight", 17, 1)
    bar = chart_by_title(at, "blk.1.ffn_up.weight, row 17, block 1 (Q4_1)")["data"][0]
    np.testing.assert_array_equal(decode(bar["y"]).astype(np.float32), f.tensor("blk.1.ffn_up.weight")[17, 32:64])
    assert bar["text"] == [str(int(q)) for q in bv.ints]
    assert any("equal, bit for bit" in c.value for c in at.caption)

    at.selectbox(key="quant.target").set_value("Q8_0").run()
    assert any("Press the button" in i.value for i in at.info)
    at.button(key="quant.run").click().run()
    assert not at.exception, at.exception
    ids = prepare_prompt(lm, PROMPT, room=0, max_tokens=48).ids
    at.slider(key="quant.layer").set_value(1)
    at.slider(key="quant.head").set_value(3).run()
    assert not at.exception, at.exception
    want = quant.compare(lm, quant.requantize(lm, "Q8_0"), ids, 1, 3)
    kl = chart_by_title(at, "KL, original ‖ Q8_0")["data"][0]
    np.testing.assert_allclose(decode(kl["y"]), want.kl, rtol=1e-6)
    pats = chart_by_title(at, "Layer 1, head 3")["data"]
    for trace, m in zip(pats[:2], (want.pattern_original, want.pattern_requantized)):
        z = decode(trace["z"]).astype(float)
        np.testing.assert_allclose(
            np.nan_to_num(z, nan=-1), np.where(np.triu(np.ones_like(m), 1) > 0, -1, m), rtol=1e-6
        )
    top = frame(at, "p Q8_0")
    assert top["token"].tolist() == lm.tokenizer.display_pieces(want.top_ids)
    np.testing.assert_allclose(top["p Q8_0"], want.p_requantized, rtol=1e-6)
    assert {m.label: m.value for m in at.metric}["KL at the last position"] == f"{want.kl[-1]:.4f} nats"


def test_a_model_not_from_gguf_gets_the_way_to_open_one():
    at = open_page("quant")
    assert not at.exception, at.exception
    assert any("GGUF" in i.value and "folder box" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_a_requantized_model_is_not_kept_in_the_shared_cache(gguf_file, monkeypatch):
    """Each Re-quantize kept a whole float32 copy of the model in the shared cache (SmolLM2: 1.0 ->
    4.1 GB over six types). Now the cache grows by the small comparison only, the sliders read it
    without re-quantizing, and its numbers are compare's on a fresh copy."""
    made = []
    requantize = quant.requantize
    monkeypatch.setattr(quant, "requantize", lambda *a, **k: made.append(a[1]) or requantize(*a, **k))
    at, lm = open_quant(gguf_file)
    cached = models.PROMPTS.nbytes + models.MODELS.nbytes
    for qtype in ("Q5_1", "Q4_0"):
        at.selectbox(key="quant.target").set_value(qtype).run()
        at.button(key="quant.run").click().run()
        assert not at.exception, at.exception
    for layer, head in [(0, 0), (1, 3)]:
        at.slider(key="quant.layer").set_value(layer)
        at.slider(key="quant.head").set_value(head).run()
        assert not at.exception, at.exception
    assert made == ["Q5_1", "Q4_0"]  # once per type, none for the sliders
    grown = models.PROMPTS.nbytes + models.MODELS.nbytes - cached
    assert 0 < grown < quant.copy_bytes(lm) / 4, (grown, models.PROMPTS.sizes())
    ids = prepare_prompt(lm, PROMPT, room=0, max_tokens=48).ids
    monkeypatch.undo()
    want = quant.compare(lm, quant.requantize(lm, "Q4_0"), ids, 1, 3)
    pats = chart_by_title(at, "Layer 1, head 3")["data"]
    np.testing.assert_array_equal(decode(pats[1]["z"]).astype(np.float32)[-1], want.pattern_requantized[-1])
    assert {m.label: m.value for m in at.metric}["KL at the last position"] == f"{want.kl[-1]:.4f} nats"


def test_two_sessions_requantizing_at_once_hold_one_copy_at_a_time(gguf_file, monkeypatch):
    """Two sessions pressing Re-quantize together each built a full copy (heavy_slots 2: two at
    once). `derived(..., alone=True)` runs them one after the other."""
    at, lm = open_quant(gguf_file)
    spec = at.session_state["app.model_spec"]
    assert server.limits().heavy_slots >= 2  # the heavy gate alone would let both run
    live, most, lock = [0], [0], threading.Lock()
    requantize = quant.requantize

    def slow(*a, **k):
        copy = requantize(*a, **k)
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        weakref.finalize(copy.model, lambda: live.__setitem__(0, live[0] - 1))
        time.sleep(0.3)  # time for the other session to start its copy
        return copy

    monkeypatch.setattr(quant, "requantize", slow)
    ids = tuple(prepare_prompt(lm, PROMPT, room=0, max_tokens=48).ids)
    results = {}

    def session(qtype):
        results[qtype] = cache.derived("quant.effects", quant.requantized_effects, spec, "cpu", qtype, ids, alone=True)

    threads = [threading.Thread(target=session, args=(q,)) for q in ("Q8_0", "Q4_0")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["Q4_0", "Q8_0"] and most[0] == 1 and live[0] == 0
