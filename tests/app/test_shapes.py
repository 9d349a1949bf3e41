"""Shapes & parameters page: the table and flow are the engine's shape trace, the parameter table
adds up to num_params, and the KV-cache size equals KVCache.nbytes()."""

from __future__ import annotations


import pytest
import torch

from tfm.analysis import shapes as tfm_shapes
from tfm.analysis import param_counts
from tfm.core.kv_cache import KVCache
from ui import models
from tfm.viz.shapes import dims

from tests.app.variants import POSITIONS, variants
from tests.app.conftest import chart_by_title, decode, open_page, use_random

PROMPT = "The cat sat on the mat. The cat sat on the"


def engine(at):
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.encode(at.session_state["sidebar.prompt"])[-lm.config.context_length :]
    return lm, ids


def frame(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def assert_table_is(at, shapes):
    table = frame(at, "axes")
    assert table["name"].tolist() == [s.name for s in shapes]
    assert table["shape"].tolist() == [" × ".join(map(str, s.shape)) for s in shapes]
    assert table["axes"].tolist() == [" × ".join(s.axes) for s in shapes]
    assert table["dtype"].tolist() == [s.dtype for s in shapes]
    assert table["stored"].tolist() == ["yes" if s.stored else "reshape only" for s in shapes]


def flow(at) -> str:
    return at.get("graphviz_chart")[0].proto.spec


def test_shape_table_and_flow_are_the_trace_and_follow_batch_and_length():
    at = open_page("shapes", PROMPT)
    lm, ids = engine(at)
    with torch.no_grad():
        real = lm.model(torch.tensor([ids]), trace=True).trace.shapes
    assert_table_is(at, real)
    dot = flow(at)
    for s in real:
        if not s.name.startswith("blocks.") or s.name.startswith("blocks.0."):
            assert dims(s) in dot, s.name
    assert f"{lm.config.n_layer - 1} more blocks" in dot
    at.number_input(key="shapes.batch").set_value(3)
    at.slider(key="shapes.length").set_value(7).run()
    assert not at.exception
    with torch.no_grad():  # a real forward of the same tokens, not the page's meta run
        real = lm.model(tfm_shapes.tile_tokens(ids, 3, 7), trace=True).trace.shapes
    assert_table_is(at, real)
    assert "batch=3 × pos=7 × d_model" in flow(at)


def test_parameter_table_adds_up_to_the_model():
    at = open_page("shapes", PROMPT)
    lm, _ = engine(at)
    counts, formulas = param_counts(lm.model), tfm_shapes.param_formulas(lm.config)
    table = frame(at, "formula")
    assert table["component"].tolist() == [*counts, "total"]
    assert table["counted"].tolist() == [*counts.values(), lm.model.num_params()]
    assert table["by formula"].tolist()[:-1] == [v for _, v in formulas.values()]
    assert table["counted"].iloc[:-1].sum() == lm.model.num_params()
    assert table["match"].tolist() == ["✓"] * 6
    bars = chart_by_title(at, "Parameters by component")["data"][0]
    assert bars["x"] == list(counts) and decode(bars["y"]).tolist() == list(counts.values())


def test_kv_cache_memory_equals_kvcache_nbytes():
    at = open_page("shapes", PROMPT)
    lm, _ = engine(at)
    cfg = lm.config
    at.number_input(key="shapes.kv_ctx").set_value(100)
    at.selectbox(key="shapes.kv_dtype").set_value("float16").run()
    assert not at.exception
    real = KVCache(cfg, batch=1, max_len=100, dtype=torch.float16).nbytes()  # a real allocation
    assert real == 2 * cfg.n_layer * cfg.n_head * cfg.d_head * 100 * 2
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["By the formula"] == metrics["tfm.core.kv_cache.KVCache(…).nbytes()"] == f"{real / 2**20:,.2f} MiB"
    assert metrics["Match"] == "✓"
    at.number_input(key="shapes.kv_layers").set_value(2 * cfg.n_layer)
    at.number_input(key="shapes.kv_batch").set_value(3).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["By the formula"] == f"{6 * real / 2**20:,.2f} MiB"


@pytest.mark.slow  # a GPT-2-width model built: CI only, like the norms and positions pages
def test_gpt2_preset_renders_with_its_124m_parameters():
    at = open_page("shapes", PROMPT)
    use_random(at, preset="gpt2")
    lm, ids = engine(at)
    assert lm.model.num_params() == 124_439_808
    table = frame(at, "formula")
    assert table["counted"].tolist()[-1] == 124_439_808 and table["match"].tolist() == ["✓"] * 6
    assert frame(at, "axes")["shape"].tolist()[-1] == f"1 × {len(ids)} × 50257"
    at.slider(key="shapes.length").set_value(1024)
    at.number_input(key="shapes.batch").set_value(8).run()  # meta device: instant at any size
    assert not at.exception
    assert frame(at, "axes")["shape"].tolist()[-1] == "8 × 1024 × 50257"


@pytest.mark.slow  # 4 x 4 model variants (tests/app/variants.py): CI only
@pytest.mark.parametrize("pos", POSITIONS)
def test_every_pair_of_variant_settings_renders(pos):
    at = open_page("shapes", PROMPT)
    use_random(at, pos_encoding=pos)
    for norm, placement, act in variants(pos):
        for name, value in (("norm", norm), ("norm_placement", placement), ("activation", act)):
            at.selectbox(key=f"sidebar.{name}").set_value(value)
        at.run()
        assert not at.exception, (pos, norm, placement, act, at.exception)
        assert not at.error, (pos, norm, placement, act)
        assert all("cut from the left" in w.value for w in at.warning), (pos, norm, placement, act)
        assert frame(at, "formula")["match"].tolist() == ["✓"] * 6, (pos, norm, placement, act)
        lm, ids = engine(at)
        with torch.no_grad():
            real = lm.model(torch.tensor([ids]), trace=True).trace.shapes
        assert_table_is(at, real)
